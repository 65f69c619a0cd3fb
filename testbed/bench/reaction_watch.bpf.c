// SPDX-License-Identifier: GPL-2.0
/*
 * Reaction watch: when each stream first and last left each switch port in
 * the current epoch, stamped in the kernel as Open vSwitch hands the packet
 * to the port (clsact egress of the switch's transmit veth <sw>-eth<n>,
 * before its queue, so a queue's delay is not in it).
 *
 * The egress hook runs whether or not the device has carrier: a packet OVS
 * still sends into a port whose cable was cut is stamped too (then dropped
 * by the device). So for a cut at time C the benchmark reads, per stream
 * that used the dead port: the last packet into the dead port (the switch
 * had not yet reacted) and the first packet out of a port the stream had
 * not used in the epoch before C (the switch, or one upstream, had).
 *
 * Only packets to or from the benchmark's port (tb_rw_cfg[1]) are kept;
 * key: addresses, ports, protocol and the device. The benchmark raises the
 * epoch (tb_rw_cfg[0]) shortly before each cut: a row of an older epoch
 * starts again at its next packet.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

struct rw_key {
	__u32 saddr;
	__u32 daddr;
	__u32 ifindex;
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 pad[3];
};

struct rw_val {
	__u64 epoch;
	__u64 first_ns;
	__u64 last_ns;
	__u64 packets;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct rw_key);
	__type(value, struct rw_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tb_rw_flows SEC(".maps");

/* [0] the epoch, [1] the port watched (host order; 0: every UDP/TCP packet) */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tb_rw_cfg SEC(".maps");

SEC("tc/react")
int on_transmit(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	__u16 *ports = data + sizeof(*eth) + sizeof(*ip);
	struct rw_key key = {};
	struct rw_val *val, fresh = {};
	__u32 zero = 0, one = 1;
	__u64 *epoch, *watch, now;

	if ((void *)(ports + 2) > end || eth->h_proto != bpf_htons(ETH_P_IP) || ip->ihl != 5)
		return TC_ACT_UNSPEC;
	if (ip->protocol != IPPROTO_UDP && ip->protocol != IPPROTO_TCP)
		return TC_ACT_UNSPEC;
	epoch = bpf_map_lookup_elem(&tb_rw_cfg, &zero);
	watch = bpf_map_lookup_elem(&tb_rw_cfg, &one);
	if (!epoch || !watch)
		return TC_ACT_UNSPEC;
	key.saddr = ip->saddr;
	key.daddr = ip->daddr;
	key.ifindex = skb->ifindex;
	key.sport = bpf_ntohs(ports[0]);
	key.dport = bpf_ntohs(ports[1]);
	key.proto = ip->protocol;
	if (*watch && key.sport != *watch && key.dport != *watch)
		return TC_ACT_UNSPEC;
	now = bpf_ktime_get_ns();
	val = bpf_map_lookup_elem(&tb_rw_flows, &key);
	if (val && val->epoch == *epoch) {
		val->last_ns = now;
		val->packets += 1;
		return TC_ACT_UNSPEC;
	}
	fresh.epoch = *epoch;
	fresh.first_ns = now;
	fresh.last_ns = now;
	fresh.packets = 1;
	bpf_map_update_elem(&tb_rw_flows, &key, &fresh, BPF_ANY);
	return TC_ACT_UNSPEC; /* go on to the next filter (the queue watch) */
}

char _license[] SEC("license") = "GPL";
