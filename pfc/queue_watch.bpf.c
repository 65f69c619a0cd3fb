// SPDX-License-Identifier: GPL-2.0
/*
 * Queue watch: byte counters and XOFF/XON crossings of every watched egress
 * queue, kept in the kernel so the PFC helper never has to ask netlink for a
 * backlog in its fast loop.
 *
 * A queue is the tbf+bfifo on a veth ("the queue's device"). Bytes offered to
 * it are counted at the device's clsact egress hook (before the qdisc, so
 * before any drop), bytes that left it at the ingress hook of the veth peer.
 * backlog = enq - deq - drop_adjust (the helper adds dropped bytes, learnt from
 * netlink, to drop_adjust). When a packet takes the backlog to XOFF or above
 * the queue is marked "over" with the time; when a departure takes it below
 * XON the mark is cleared with the time. The helper mmaps tb_queues and polls
 * the marks; it alone pauses and resumes transmitters.
 *
 * Ingress accounting: on enqueue into a watched queue, the IPv4 source address
 * names the GPU NIC the packet came from (tb_src); its arrival time is kept
 * per (queue, NIC) in tb_seen, so at XOFF the helper pauses only the feeders
 * that NICs with packets in the queue came through, as a real switch pauses
 * only the ingress ports whose bytes fill its buffer.
 *
 * Dynamic thresholds (alpha_x256 != 0): the queues of one switch share a
 * pool of `shared` bytes, and a queue's XOFF is alpha x (shared - bytes queued
 * in the whole switch), at least `xoff`; XON is `xoff` bytes below that, at
 * least `xon`. The switch's bytes are counted in an extra row of tb_queues
 * (sw_slot). Like a real switch (and HPCC's), a queue checks at its own
 * enqueues and departures. alpha_x256 = 0: the static xoff/xon.
 *
 * Doorbell: every crossing also writes a record to the tb_bell ring buffer,
 * which wakes the helper at once (it waits on the ring, not on a timer: in a
 * VM a timer wake-up can come milliseconds late). The helper skips the
 * records; the marks in tb_queues say what changed.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define MAX_QUEUES 2048
#define MAX_NICS 256

struct qstate {
	__u64 enq_bytes;
	__u64 deq_bytes;
	__u64 drop_adjust;
	__u64 xoff;          /* thresholds in bytes; 0: crossings not tracked */
	__u64 xon;
	__u64 over;          /* 1 from an XOFF crossing to the next XON crossing */
	__u64 xoff_ns;       /* time of the last XOFF crossing (CLOCK_MONOTONIC) */
	__u64 xon_ns;        /* time of the last XON crossing */
	__u64 last_deq_ns;   /* time of the last departure of traffic (not of a MAC control frame) */
	__u64 resume_mark;   /* set by the helper on resume; cleared by the next traffic departure */
	__u64 first_deq_ns;  /* time of the first traffic departure after resume_mark was set */
	__u64 max_backlog;   /* high-water mark, reset by the helper */
	__u64 ctl_deq_ns;    /* time the last MAC control (PFC) frame left: the helper's own */
	__u64 alpha_x256;    /* dynamic threshold's alpha in 1/256; 0: static thresholds */
	__u64 shared;        /* the switch's shared pool, bytes (dynamic only) */
	__u64 sw_slot;       /* row counting the whole switch's bytes (dynamic only) */
	__u64 xoff_at;       /* the XOFF threshold at the last XOFF crossing */
	__u64 pad[7];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_QUEUES);
	__type(key, __u32);
	__type(value, struct qstate);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tb_queues SEC(".maps");

/* ifindex -> slot in tb_queues, one map per hook (root namespace devices) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tb_enq_slot SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tb_deq_slot SEC(".maps");

/* IPv4 source address (network order) -> NIC index */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_NICS);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tb_src SEC(".maps");

/* slot * MAX_NICS + NIC index -> last time a packet of that NIC entered the queue */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_QUEUES * MAX_NICS);
	__type(key, __u32);
	__type(value, __u64);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tb_seen SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16384);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} tb_bell SEC(".maps");

static __always_inline void ring_bell(__u32 slot)
{
	/* forced: the helper skips records, so the ring's own "wake only when the
	 * reader has caught up" rule must not hold a wake-up back */
	bpf_ringbuf_output(&tb_bell, &slot, sizeof(slot), BPF_RB_FORCE_WAKEUP);
}

static __always_inline struct qstate *queue_of(void *slots, __u32 ifindex, __u32 *slot_out)
{
	__u32 *slot = bpf_map_lookup_elem(slots, &ifindex);

	if (!slot)
		return 0;
	*slot_out = *slot;
	return bpf_map_lookup_elem(&tb_queues, slot);
}

static __always_inline void note_source(struct __sk_buff *skb, __u32 slot, __u64 now)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	__u32 *nic, key;
	__u64 *seen;

	if ((void *)(ip + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return;
	nic = bpf_map_lookup_elem(&tb_src, &ip->saddr);
	if (!nic || *nic >= MAX_NICS || slot >= MAX_QUEUES)
		return;
	key = slot * MAX_NICS + *nic;
	seen = bpf_map_lookup_elem(&tb_seen, &key);
	if (seen)
		*seen = now;
}

/* the row counting the bytes of the queue's switch (dynamic thresholds only):
 * a queue's bytes in and out count there too */
static __always_inline struct qstate *switch_of(struct qstate *q)
{
	__u32 s = q->sw_slot;

	return q->alpha_x256 ? bpf_map_lookup_elem(&tb_queues, &s) : 0;
}

/* the queue's XOFF and XON thresholds now (static ones unless it has a switch row) */
static __always_inline void thresholds(struct qstate *q, struct qstate *sw, __u64 *xoff, __u64 *xon)
{
	__u64 t = q->xoff, used, dyn;

	if (sw) {
		used = sw->enq_bytes - sw->deq_bytes - sw->drop_adjust;
		if (used >= (1ULL << 40)) /* a departure counted before its arrival */
			used = 0;
		dyn = used < q->shared ? ((q->shared - used) * q->alpha_x256) >> 8 : 0;
		if (dyn > t)
			t = dyn;
	}
	*xoff = t;
	*xon = t - q->xoff > q->xon ? t - q->xoff : q->xon;
}

static __always_inline int is_mac_control(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > (void *)(long)skb->data_end)
		return 0;
	return eth->h_proto == bpf_htons(0x8808);
}

SEC("tc/enqueue")
int on_enqueue(struct __sk_buff *skb)
{
	__u32 slot = 0;
	struct qstate *q = queue_of(&tb_enq_slot, skb->ifindex, &slot), *sw;
	__u64 enq, backlog, xoff, xon;

	if (!q)
		return TC_ACT_OK;
	if (q->xoff)
		note_source(skb, slot, bpf_ktime_get_ns());
	enq = __sync_fetch_and_add(&q->enq_bytes, skb->len) + skb->len;
	sw = switch_of(q);
	if (sw)
		__sync_fetch_and_add(&sw->enq_bytes, skb->len);
	backlog = enq - q->deq_bytes - q->drop_adjust;
	if (backlog > q->max_backlog && backlog < (1ULL << 40))
		q->max_backlog = backlog;
	if (!q->xoff || q->over)
		return TC_ACT_OK;
	thresholds(q, sw, &xoff, &xon);
	if (backlog >= xoff && backlog < (1ULL << 40)) {
		q->xoff_ns = bpf_ktime_get_ns();
		q->xoff_at = xoff;
		q->over = 1;
		ring_bell(slot);
	}
	return TC_ACT_OK;
}

SEC("tc/dequeue")
int on_dequeue(struct __sk_buff *skb)
{
	__u32 slot = 0;
	struct qstate *q = queue_of(&tb_deq_slot, skb->ifindex, &slot), *sw;
	__u64 deq, backlog, now, xoff, xon;

	if (!q)
		return TC_ACT_UNSPEC;
	now = bpf_ktime_get_ns();
	deq = __sync_fetch_and_add(&q->deq_bytes, skb->len) + skb->len;
	sw = switch_of(q);
	if (sw)
		__sync_fetch_and_add(&sw->deq_bytes, skb->len);
	backlog = q->enq_bytes - deq - q->drop_adjust;
	if (is_mac_control(skb)) {
		/* the helper's own XOFF/XON frame: its bytes count (they were
		 * counted in), but it is not the queue's traffic, so it neither
		 * ends a pause's latency nor starts a resume's */
		q->ctl_deq_ns = now;
	} else {
		q->last_deq_ns = now;
		if (q->resume_mark) {
			q->first_deq_ns = now;
			q->resume_mark = 0;
		}
	}
	if (!q->over)
		return TC_ACT_UNSPEC;
	thresholds(q, sw, &xoff, &xon);
	if (backlog < xon || backlog >= (1ULL << 40)) {
		q->xon_ns = now;
		q->over = 0;
		ring_bell(slot);
	}
	return TC_ACT_UNSPEC; /* go on to the next filter (the mirred redirect, if any) */
}

char _license[] SEC("license") = "GPL";
