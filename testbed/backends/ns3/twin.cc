// The ns-3 twin's per-packet work (compiled at run time by cppyy; see testbed/backends/ns3/engine.py).
//
// * Switches are plain nodes (no IP stack): a packet arriving on a port is looked up in the switch's
//   flow table (src ip, dst ip, src port, dst port -> output port, installed per connection from the
//   fabric model) and queued at that port's egress FIFO (byte limit, counters, PFC).
// * A GPU is a node with the internet stack and one device per NIC port; its NIC queue is a GateQueueDisc
//   (byte limit, counters, a pause gate that hands the device a frame only when the wire is free).
// * PFC: a switch egress queue whose backlog crosses XOFF holds the transmitters that feed it (those with
//   bytes in it) after the cable's delay and the MAC's reaction; a held transmitter finishes the frame it is
//   sending and starts no other; at XON the queue releases them; a transmitter resumes when the last queue
//   holding it lets go. While congested, each feeding link may add at most its headroom (else a drop, which
//   fails the run). Every pause and resume is logged as in the emulator's pfc.txt.
// * Connections: persistent TCP per NIC port pair; messages are written back to back and counted off at
//   the receiver in order; each whole arrival is handed to Python (per message, not per packet).
#include "ns3/core-module.h"
#include "ns3/network-module.h"
#include "ns3/internet-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"
#include <deque>
#include <functional>
#include <map>
#include <sstream>
#include <unordered_map>
#include <vector>

namespace tb
{
using namespace ns3;

struct Twin;

// One queue's counters (frame bytes = IP bytes + 14, as the emulator's queues count them).
struct Counters
{
    uint64_t bytes = 0, packets = 0, drops = 0, backlog = 0;
};

// A transmitter PFC can hold: a switch egress port or a host NIC queue.
struct Tx
{
    std::string node;
    int nodeType = 0; // 1 switch, 0 host
    int port = 0;
    int holders = 0;
    bool isSwitch = false;
    int index = -1; // into Twin::ports or Twin::gates
};

// A token bucket at the link rate (the emulator's tbf: rate, burst): a frame leaves when the bucket holds its
// bytes; an idle bucket fills up to its size, so after a quiet spell that many bytes leave at the line's speed.
// size 0: no bucket (the link's own rate serialises every frame).
struct Bucket
{
    double rateBps = 0;
    uint64_t size = 0;
    double tokens = -1; // -1: full (not yet used)
    Time last;
    // how long until a frame of `bytes` may leave (zero: now, and its tokens are taken)
    Time Wait(uint32_t bytes)
    {
        if (size == 0)
            return Time(0);
        Time now = Simulator::Now();
        tokens = tokens < 0 ? double(size) : std::min(double(size), tokens + (now - last).GetSeconds() * rateBps / 8);
        last = now;
        if (tokens >= bytes)
        {
            tokens -= bytes;
            return Time(0);
        }
        return Seconds((bytes - tokens) * 8 / rateBps) + NanoSeconds(1);
    }
};

class GateQueueDisc : public QueueDisc
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("tb::GateQueueDisc").SetParent<QueueDisc>().SetGroupName("TrafficControl");
        return tid;
    }
    GateQueueDisc() : QueueDisc(QueueDiscSizePolicy::NO_LIMITS) {}
    Counters c;
    uint64_t limit = 0;
    bool paused = false;
    // a frame is on the wire: the next leaves the gate only when it ends (PhyTxEnd), so a pause stops the NIC at a
    // frame boundary, as a real MAC does (it finishes the frame it is sending and starts no other); handing the
    // device its next frame early would let that one leave after the pause too (ns-3's device queue holds one)
    bool busy = false;
    Bucket bucket; // the NIC's shaper (twin.burst_bytes)
    bool bucketWait = false;
    void Pause() { paused = true; }
    void Resume()
    {
        paused = false;
        Run();
    }
    void TxEnd(Ptr<const Packet>)
    {
        busy = false;
        // not inside the device's transmit-complete (it clears its current packet after the trace)
        Simulator::ScheduleNow(&GateQueueDisc::Kick, this);
    }
    void Kick() { Run(); }
    void BucketReady()
    {
        bucketWait = false;
        Run();
    }

  private:
    // Linux's TCP small queues keep each socket to about two frames in the NIC's qdisc, so backlogged
    // connections take turns at the wire; here each flow (by its 5-tuple hash) has its own internal queue and
    // the gate serves the active ones round robin, a packet each. The internal queues keep QueueDisc's own
    // statistics consistent.
    static const uint32_t BUCKETS = 64;
    std::deque<uint32_t> active;
    bool DoEnqueue(Ptr<QueueDiscItem> item) override
    {
        uint32_t s = item->GetSize() + 14;
        if (c.backlog + s > limit)
        {
            c.drops++;
            DropBeforeEnqueue(item, "limit");
            return false;
        }
        uint32_t b = item->Hash(0) % BUCKETS;
        Ptr<InternalQueue> q = GetInternalQueue(b);
        bool idle = q->IsEmpty();
        if (!q->Enqueue(item))
            return false;
        if (idle)
            active.push_back(b);
        c.backlog += s;
        return true;
    }
    Ptr<QueueDiscItem> DoDequeue() override
    {
        if (paused || busy || active.empty() || bucketWait)
            return nullptr;
        Time w = bucket.Wait(GetInternalQueue(active.front())->Peek()->GetSize() + 14);
        if (!w.IsZero())
        {
            bucketWait = true;
            Simulator::Schedule(w, &GateQueueDisc::BucketReady, this);
            return nullptr;
        }
        uint32_t b = active.front();
        active.pop_front();
        Ptr<InternalQueue> q = GetInternalQueue(b);
        Ptr<QueueDiscItem> item = q->Dequeue();
        if (!q->IsEmpty())
            active.push_back(b);
        uint32_t s = item->GetSize() + 14;
        c.backlog -= s;
        c.bytes += s;
        c.packets++;
        busy = true;
        return item;
    }
    Ptr<const QueueDiscItem> DoPeek() override
    {
        return (paused || busy || active.empty()) ? nullptr : GetInternalQueue(active.front())->Peek();
    }
    bool CheckConfig() override
    {
        while (GetNInternalQueues() < BUCKETS)
        {
            Ptr<InternalQueue> q = CreateObject<DropTailQueue<QueueDiscItem>>();
            q->SetMaxSize(QueueSize("1000000p"));
            AddInternalQueue(q);
        }
        return true;
    }
    void InitializeParams() override {}
};

struct FlowKey
{
    uint32_t src, dst;
    uint16_t sport, dport;
    bool operator==(const FlowKey& o) const
    {
        return src == o.src && dst == o.dst && sport == o.sport && dport == o.dport;
    }
};

struct FlowHash
{
    size_t operator()(const FlowKey& k) const
    {
        uint64_t a = (uint64_t(k.src) << 32) | k.dst;
        uint64_t b = (uint64_t(k.sport) << 16) | k.dport;
        return std::hash<uint64_t>()(a * 0x9E3779B97F4A7C15ULL ^ b);
    }
};

struct Packeted
{
    Ptr<Packet> p;
    int feeder; // the transmitter it came from (index into Twin::txs)
    uint32_t size; // frame bytes
};

// A switch egress port.
struct Port
{
    Twin* tw = nullptr;
    int sw = -1;
    int tx = -1; // this port as a transmitter
    Ptr<NetDevice> dev;
    int peerTx = -1; // the transmitter at the other end of the cable (feeds this switch through this port)
    std::deque<Packeted> q;
    Counters c;
    uint64_t limit = 0;
    bool busy = false, paused = false, congested = false;
    Bucket bucket; // the port's shaper (twin.burst_bytes)
    bool bucketWait = false;
    void BucketReady()
    {
        bucketWait = false;
        TrySend();
    }
    int64_t xoff = 0, xon = 0; // static thresholds (dynamic: the floors)
    std::unordered_map<int, uint64_t> inBytes; // feeder -> bytes of it queued here
    std::vector<int> held;
    // while congested: held feeder -> bytes it delivered here since its hold was decided (the crossing, or its
    // first frame after it); each feeding link has its own headroom (Twin::headroom), as a switch's ingress ports
    std::unordered_map<int, uint64_t> since;
    void TrySend();
    void TxEnd(Ptr<const Packet>);
};

struct Switch
{
    std::string name;
    Ptr<Node> node;
    std::map<int, int> portOf; // OpenFlow port -> index into Twin::ports
    std::unordered_map<FlowKey, int, FlowHash> flows; // -> index into Twin::ports
    uint64_t total = 0; // bytes queued in the whole switch (dynamic thresholds)
    uint64_t shared = 0;
};

struct Msg
{
    int64_t id;
    uint64_t bytes; // on the wire: the agents' frame header and the payload
    bool oneWrite = false; // header and payload written together (the agents' Channel.submit on an idle connection)
};

struct Conn
{
    int src, dst; // GPU indexes
    Ptr<Socket> tx;
    Ptr<Socket> rx; // the accepted end (it answers each whole frame with the agents' ack)
    bool connected = false;
    std::deque<Msg> sendq;
    uint64_t sendLeft = 0; // of the head message
    std::deque<Msg> recvq;
    uint64_t recvGot = 0;
    bool headerOut = false; // a header was just written: the payload follows once the header has left
};

struct Gpu
{
    Ptr<Node> node;
    Ptr<NetDevice> dev[3];
    int gate[3] = {-1, -1, -1};
    uint32_t ip[3] = {0, 0, 0};
};

struct Twin
{
    double rateBps;
    uint32_t mtu;
    Time delay;
    uint32_t nicLimit;
    bool pfc = false;
    double alpha = 0; // 0: static thresholds
    // PFC's timing and headroom (set from testbed/backends/ns3/pfc.py): a hold or release lands at the upstream
    // transmitter a cable delay + its MAC's reaction after the crossing, and stops it at a frame boundary; what
    // one feeding link can still deliver after its hold is decided is bounded by `headroom` bytes (0: unchecked)
    double reactionS = 0;
    uint64_t headroom = 0;
    uint64_t headroomUsed = 0; // the most bytes one feeding link delivered after its hold was decided
    uint64_t headroomDrops = 0; // frames dropped because their link's headroom was used up (counted in drops too)
    uint32_t frame;
    uint16_t listenPort;
    // the agents' wire format (traffic.runtime.wire): each message goes as a frame header and its payload,
    // and the receiver answers each whole frame with an ack on the same connection (0, 0: payload only)
    uint32_t frameHeader = 0, ackBytes = 0;
    // a message of at most this many payload bytes on a connected connection with nothing of its own waiting
    // goes in one write, header and payload (traffic.runtime.sender.FAST_PATH_BYTES); others as two writes
    uint64_t oneWriteBytes = 0;
    // seconds (0: none): a switch's forwarding time per packet before its egress queue; from a send to its write
    double hopDelayS = 0, sendDelayS = 0;
    // the shapers' burst (0: none); with one, a cable runs BURST_LINE times the link rate (the emulator's veth:
    // the bucket, not the cable, keeps the rate) and every transmitter has a bucket at the link rate
    uint64_t burstBytes = 0;
    static constexpr double BURST_LINE = 1000;
    uint64_t acksReceived = 0;
    std::vector<Gpu> gpus;
    std::vector<Switch> switches;
    std::vector<Port> ports;
    std::vector<Ptr<GateQueueDisc>> gates;
    std::vector<Tx> txs;
    std::vector<Conn> conns;
    std::map<std::pair<uint32_t, uint16_t>, int> connBySrc; // (src ip, sport) -> conn
    std::ostringstream log;
    uint64_t noRoute = 0;
    std::string firstNoRoute;
    // message records (seconds; -1: not yet), indexed by message id (the cluster's ids and the replay's row
    // indexes count up from 0): first byte and end at the receiver, last byte written at the sender
    std::vector<double> firstByte, endAt, senderEnd;
    static void Record(std::vector<double>& v, int64_t id, double t)
    {
        if (id < 0)
            return;
        if (size_t(id) >= v.size())
            v.resize(std::max<size_t>(size_t(id) + 1, 2 * v.size()), -1.0);
        v[size_t(id)] = t;
    }
    static double Recorded(const std::vector<double>& v, int64_t id)
    {
        return (id < 0 || size_t(id) >= v.size()) ? -1.0 : v[size_t(id)];
    }
    std::function<void(int64_t)> onDelivered;
    std::function<void(int64_t)> onTimer;

    Twin(double rate, uint32_t mtu_, double delayS, uint32_t nicLimit_, uint16_t port)
        : rateBps(rate), mtu(mtu_), delay(Seconds(delayS)), nicLimit(nicLimit_), frame(mtu_ + 14),
          listenPort(port)
    {
    }

    PointToPointHelper Helper()
    {
        PointToPointHelper h;
        h.SetDeviceAttribute("DataRate", DataRateValue(DataRate(uint64_t(burstBytes ? rateBps * BURST_LINE : rateBps))));
        h.SetDeviceAttribute("Mtu", UintegerValue(mtu));
        h.SetChannelAttribute("Delay", TimeValue(delay));
        h.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", QueueSizeValue(QueueSize("1p")));
        return h;
    }

    int AddGpu(uint32_t ip1, uint32_t ip2)
    {
        Gpu g;
        g.node = CreateObject<Node>();
        g.ip[1] = ip1;
        g.ip[2] = ip2;
        gpus.push_back(g);
        return int(gpus.size()) - 1;
    }

    int AddSwitch(const std::string& name, uint64_t shared)
    {
        Switch s;
        s.name = name;
        s.node = CreateObject<Node>();
        s.shared = shared;
        switches.push_back(s);
        return int(switches.size()) - 1;
    }

    int NewTx(const std::string& node, int type, int port, bool isSwitch, int index)
    {
        Tx t;
        t.node = node;
        t.nodeType = type;
        t.port = port;
        t.isSwitch = isSwitch;
        t.index = index;
        txs.push_back(t);
        return int(txs.size()) - 1;
    }

    int NewPort(int sw, int ofPort, Ptr<NetDevice> dev, uint64_t limit, int64_t xoff, int64_t xon)
    {
        Port p;
        p.tw = this;
        p.bucket.rateBps = rateBps;
        p.bucket.size = burstBytes;
        p.sw = sw;
        p.dev = dev;
        p.limit = limit;
        p.xoff = xoff;
        p.xon = xon;
        ports.push_back(p);
        int idx = int(ports.size()) - 1;
        switches[sw].portOf[ofPort] = idx;
        ports[idx].tx = NewTx(switches[sw].name, 1, ofPort, true, idx);
        dev->SetReceiveCallback(MakeCallback(&Twin::Receive, this));
        return idx;
    }

    // GPU g's NIC port p to switch sw's OpenFlow port; returns the switch port's index
    int CableHost(int g, int p, int sw, int ofPort, uint64_t limit, int64_t xoff, int64_t xon)
    {
        NetDeviceContainer d = Helper().Install(gpus[g].node, switches[sw].node);
        gpus[g].dev[p] = d.Get(0);
        int idx = NewPort(sw, ofPort, d.Get(1), limit, xoff, xon);
        Ptr<GateQueueDisc> gate = CreateObject<GateQueueDisc>();
        gate->limit = nicLimit;
        gate->bucket.rateBps = rateBps;
        gate->bucket.size = burstBytes;
        gates.push_back(gate);
        gpus[g].gate[p] = int(gates.size()) - 1;
        int htx = NewTx("gpu" + std::to_string(g + 1), 0, p, false, gpus[g].gate[p]);
        ports[idx].peerTx = htx;
        return idx;
    }

    // two switch ports cabled together; returns the first one's index (the second's is the next)
    int CableSwitches(int a, int aPort, int b, int bPort, uint64_t limA, int64_t xoffA, int64_t xonA, uint64_t limB,
                      int64_t xoffB, int64_t xonB)
    {
        NetDeviceContainer d = Helper().Install(switches[a].node, switches[b].node);
        int ia = NewPort(a, aPort, d.Get(0), limA, xoffA, xonA);
        int ib = NewPort(b, bPort, d.Get(1), limB, xoffB, xonB);
        ports[ia].peerTx = ports[ib].tx;
        ports[ib].peerTx = ports[ia].tx;
        return ia;
    }

    void Finish()
    {
        InternetStackHelper stack;
        for (auto& g : gpus)
        {
            stack.Install(g.node);
            Ptr<Ipv4> ipv4 = g.node->GetObject<Ipv4>();
            Ptr<TrafficControlLayer> tc = g.node->GetObject<TrafficControlLayer>();
            Ipv4StaticRoutingHelper rh;
            Ptr<Ipv4StaticRouting> rt = rh.GetStaticRouting(ipv4);
            for (int p = 1; p <= 2; p++)
            {
                int ifc = ipv4->AddInterface(g.dev[p]);
                // a host address (/32): no connected /16 route to compete with the plane routes below
                ipv4->AddAddress(ifc, Ipv4InterfaceAddress(Ipv4Address(g.ip[p]), Ipv4Mask("255.255.255.255")));
                ipv4->SetUp(ifc);
                tc->SetRootQueueDiscOnDevice(g.dev[p], gates[g.gate[p]]);
                // hosts route by destination plane: 10.2/16 leaves on port 1, 10.1/16 on port 2
                uint32_t plane = (p == 1) ? 2 : 1;
                rt->AddNetworkRouteTo(Ipv4Address((10u << 24) | (plane << 16)), Ipv4Mask("255.255.0.0"), ifc);
            }
            Ptr<Socket> l = Socket::CreateSocket(g.node, TcpSocketFactory::GetTypeId());
            l->Bind(InetSocketAddress(Ipv4Address::GetAny(), listenPort));
            l->Listen();
            l->SetAcceptCallback(MakeNullCallback<bool, Ptr<Socket>, const Address&>(),
                                 MakeCallback(&Twin::Accepted, this));
        }
        for (auto& p : ports)
        {
            p.dev->TraceConnectWithoutContext("PhyTxEnd", MakeCallback(&Port::TxEnd, &p));
        }
        for (auto& g : gpus)
            for (int i = 1; i <= 2; i++)
                g.dev[i]->TraceConnectWithoutContext("PhyTxEnd",
                                                     MakeCallback(&GateQueueDisc::TxEnd, PeekPointer(gates[g.gate[i]])));
        // drops nobody should see: a device queue overflowing or a frame lost on the wire
        for (auto& p : ports)
            WatchDevice(p.dev);
        for (auto& g : gpus)
            for (int i = 1; i <= 2; i++)
                WatchDevice(g.dev[i]);
    }

    uint64_t deviceDrops = 0;
    void DeviceDrop(Ptr<const Packet>) { deviceDrops++; }
    void WatchDevice(Ptr<NetDevice> d)
    {
        for (const char* t : {"MacTxDrop", "PhyTxDrop", "PhyRxDrop"})
            d->TraceConnectWithoutContext(t, MakeCallback(&Twin::DeviceDrop, this));
    }

    void Route(int sw, uint32_t src, uint32_t dst, uint16_t sport, uint16_t dport, int ofPort)
    {
        switches[sw].flows[FlowKey{src, dst, sport, dport}] = switches[sw].portOf.at(ofPort);
    }

    // the OpenFlow port the switch's flow table sends this flow out of (-1: none), for the tests
    int Lookup(int sw, uint32_t src, uint32_t dst, uint16_t sport, uint16_t dport) const
    {
        auto it = switches[sw].flows.find(FlowKey{src, dst, sport, dport});
        return it == switches[sw].flows.end() ? -1 : txs[ports[it->second].tx].port;
    }

    // ------------------------------------------------------------------ forwarding and PFC
    bool Receive(Ptr<NetDevice> dev, Ptr<const Packet> pkt, uint16_t, const Address&)
    {
        uint8_t buf[24];
        pkt->CopyData(buf, 24);
        uint32_t ihl = (buf[0] & 0x0f) * 4;
        FlowKey k;
        k.src = (uint32_t(buf[12]) << 24) | (uint32_t(buf[13]) << 16) | (uint32_t(buf[14]) << 8) | buf[15];
        k.dst = (uint32_t(buf[16]) << 24) | (uint32_t(buf[17]) << 16) | (uint32_t(buf[18]) << 8) | buf[19];
        uint8_t ports4[4];
        pkt->CopyData(buf, ihl + 4);
        for (int i = 0; i < 4; i++)
            ports4[i] = buf[ihl + i];
        k.sport = (uint16_t(ports4[0]) << 8) | ports4[1];
        k.dport = (uint16_t(ports4[2]) << 8) | ports4[3];
        // which port it came in on: the transmitter that fed it is that port's peer
        int inPort = InPort(dev);
        Switch& s = switches[ports[inPort].sw];
        auto it = s.flows.find(k);
        if (it == s.flows.end())
        {
            if (noRoute == 0)
            {
                std::ostringstream o;
                o << s.name << " " << Ipv4Address(k.src) << ":" << k.sport << " -> " << Ipv4Address(k.dst) << ":"
                  << k.dport;
                firstNoRoute = o.str();
            }
            noRoute++;
            return true;
        }
        if (hopDelayS > 0)
            Simulator::Schedule(Seconds(hopDelayS), &Twin::Enqueue, this, it->second, pkt->Copy(),
                                ports[inPort].peerTx);
        else
            Enqueue(it->second, pkt->Copy(), ports[inPort].peerTx);
        return true;
    }

    std::unordered_map<NetDevice*, int> portByDev;

    int InPort(Ptr<NetDevice> dev)
    {
        if (portByDev.empty())
        {
            for (size_t i = 0; i < ports.size(); i++)
                portByDev[PeekPointer(ports[i].dev)] = int(i);
        }
        return portByDev.at(PeekPointer(dev));
    }

    int64_t Xoff(const Port& p) const
    {
        if (alpha <= 0)
            return p.xoff;
        const Switch& s = switches[p.sw];
        double free = double(s.shared) - double(s.total);
        return std::max<int64_t>(p.xoff, int64_t(alpha * std::max(0.0, free)));
    }

    int64_t Xon(const Port& p) const
    {
        if (alpha <= 0)
            return p.xon;
        return std::max<int64_t>(Xoff(p) - 2 * int64_t(frame), frame);
    }

    void Enqueue(int pi, Ptr<Packet> pkt, int feeder)
    {
        Port& p = ports[pi];
        uint32_t s = pkt->GetSize() + 14;
        auto h = (pfc && p.congested) ? p.since.find(feeder) : p.since.end();
        bool overHeadroom = h != p.since.end() && headroom > 0 && h->second + s > headroom;
        if (p.c.backlog + s > p.limit || overHeadroom)
        {
            p.c.drops++;
            headroomDrops += overHeadroom;
            return;
        }
        p.q.push_back(Packeted{pkt, feeder, s});
        p.c.backlog += s;
        p.inBytes[feeder] += s;
        switches[p.sw].total += s;
        if (pfc)
        {
            if (!p.congested && int64_t(p.c.backlog) > Xoff(p))
            {
                p.congested = true;
                p.since.clear();
                for (auto& kv : p.inBytes)
                    if (kv.second > 0)
                        Hold(pi, kv.first);
                p.since[feeder] = s; // the crossing frame is the first of its link's headroom
            }
            else if (p.congested)
            {
                if (h == p.since.end())
                {
                    Hold(pi, feeder);
                    h = p.since.find(feeder);
                }
                h->second += s;
            }
            if (p.congested)
                headroomUsed = std::max<uint64_t>(headroomUsed, p.since[feeder]);
        }
        p.TrySend();
    }

    void Hold(int pi, int txi)
    {
        ports[pi].held.push_back(txi);
        ports[pi].since[txi] = 0;
        Simulator::Schedule(delay + Seconds(reactionS), &Twin::Apply, this, pi, txi, 1);
    }

    void Dequeued(int pi)
    {
        Port& p = ports[pi];
        if (pfc && p.congested && int64_t(p.c.backlog) <= Xon(p))
        {
            p.congested = false;
            for (int txi : p.held)
                Simulator::Schedule(delay + Seconds(reactionS), &Twin::Apply, this, pi, txi, 0);
            p.held.clear();
            p.since.clear();
        }
    }

    void Apply(int cause, int txi, int pause)
    {
        Tx& t = txs[txi];
        t.holders += pause ? 1 : -1;
        if ((pause && t.holders != 1) || (!pause && t.holders != 0))
            return;
        const Port& c = ports[cause];
        log << Simulator::Now().GetNanoSeconds() << " " << t.node << " " << t.nodeType << " " << t.port << " "
            << pause << " " << switches[c.sw].name << ":" << txs[c.tx].port << "\n";
        if (t.isSwitch)
        {
            Port& p = ports[t.index];
            p.paused = pause;
            if (!pause)
                p.TrySend();
        }
        else if (pause)
            gates[t.index]->Pause();
        else
            gates[t.index]->Resume();
    }

    // ------------------------------------------------------------------ connections and messages
    int Open(int src, int sp, uint16_t sport, int dst, int dp)
    {
        Conn c;
        c.src = src;
        c.dst = dst;
        conns.push_back(c);
        int ci = int(conns.size()) - 1;
        connBySrc[{gpus[src].ip[sp], sport}] = ci;
        Ptr<Socket> s = Socket::CreateSocket(gpus[src].node, TcpSocketFactory::GetTypeId());
        s->Bind(InetSocketAddress(Ipv4Address(gpus[src].ip[sp]), sport));
        s->SetConnectCallback(MakeCallback(&Twin::Connected, this), MakeCallback(&Twin::ConnectFailed, this));
        s->SetSendCallback(MakeCallback(&Twin::Space, this));
        s->SetRecvCallback(MakeCallback(&Twin::RecvAcks, this));
        conns[ci].tx = s;
        // connect from an event: before the run starts, the nodes' traffic control is not set up yet
        Simulator::ScheduleNow(&Twin::Connect, this, ci, gpus[dst].ip[dp]);
        return ci;
    }

    void Connect(int ci, uint32_t ip) { conns[ci].tx->Connect(InetSocketAddress(Ipv4Address(ip), listenPort)); }

    std::unordered_map<Socket*, int> connOfTx, connOfRx;

    int ConnOf(std::unordered_map<Socket*, int>& m, Ptr<Socket> s, bool tx)
    {
        auto it = m.find(PeekPointer(s));
        if (it != m.end())
            return it->second;
        if (tx)
            for (size_t i = 0; i < conns.size(); i++)
                if (conns[i].tx == s)
                    return m[PeekPointer(s)] = int(i);
        return -1;
    }

    void Connected(Ptr<Socket> s)
    {
        int ci = ConnOf(connOfTx, s, true);
        conns[ci].connected = true;
        Pump(ci);
    }

    void ConnectFailed(Ptr<Socket> s) { connectFailures++; }

    uint64_t connectFailures = 0;

    void Space(Ptr<Socket> s, uint32_t)
    {
        int ci = ConnOf(connOfTx, s, true);
        if (ci >= 0 && conns[ci].connected)
            Pump(ci);
    }

    void Accepted(Ptr<Socket> s, const Address& from)
    {
        InetSocketAddress a = InetSocketAddress::ConvertFrom(from);
        auto it = connBySrc.find({a.GetIpv4().Get(), a.GetPort()});
        if (it == connBySrc.end())
            return;
        connOfRx[PeekPointer(s)] = it->second;
        conns[it->second].rx = s;
        s->SetRecvCallback(MakeCallback(&Twin::Recv, this));
    }

    // the sender's side reads the acks (bytes only: delivery is the receiver's record, as the agents report it)
    void RecvAcks(Ptr<Socket> s)
    {
        Ptr<Packet> p;
        while ((p = s->Recv()))
            acksReceived += p->GetSize();
    }

    // a message to write on connection ci, after the senders' delay (in order: the delay is the same for all)
    void Send(int ci, int64_t id, uint64_t bytes)
    {
        if (sendDelayS > 0)
            Simulator::Schedule(Seconds(sendDelayS), &Twin::Write, this, ci, id, bytes);
        else
            Write(ci, id, bytes);
    }

    void Write(int ci, int64_t id, uint64_t bytes)
    {
        Conn& c = conns[ci];
        bool oneWrite = c.connected && c.sendq.empty() && bytes <= oneWriteBytes;
        bytes += frameHeader;
        if (c.sendq.empty())
            c.sendLeft = bytes;
        c.sendq.push_back(Msg{id, bytes, oneWrite});
        c.recvq.push_back(Msg{id, bytes});
        if (c.connected)
            Pump(ci);
    }

    void SendAt(double at, int ci, int64_t id, uint64_t bytes)
    {
        Simulator::Schedule(Seconds(at) - Simulator::Now(), &Twin::Send, this, ci, id, bytes);
    }

    void PumpAfterHeader(int ci)
    {
        conns[ci].headerOut = false;
        Pump(ci);
    }

    void Pump(int ci)
    {
        Conn& c = conns[ci];
        if (c.headerOut)
            return;
        while (!c.sendq.empty())
        {
            uint32_t room = c.tx->GetTxAvailable();
            if (room == 0)
                return;
            // a small message on an idle connection goes in one write (the agents' fast path); otherwise the
            // frame header is written on its own (the writer's two sendall calls, TCP_NODELAY): on an idle
            // connection it leaves as a segment of its own, behind a backlog it joins the queued bytes
            bool oneWrite = c.sendq.front().oneWrite;
            uint64_t payload = c.sendq.front().bytes - frameHeader;
            uint64_t part = (c.sendLeft > payload && !oneWrite) ? c.sendLeft - payload : c.sendLeft;
            uint32_t n = uint32_t(std::min<uint64_t>(room, part));
            int sent = c.tx->Send(Create<Packet>(n));
            if (sent <= 0)
                return;
            c.sendLeft -= uint64_t(sent);
            if (frameHeader && !oneWrite && c.sendLeft == payload && payload > 0)
            {
                // ns-3's TCP sends what its buffer holds one time step after a write: write the payload after
                // that, so the header goes as Linux sends it (alone when the window is open and nothing waits)
                c.headerOut = true;
                Simulator::Schedule(TimeStep(2), &Twin::PumpAfterHeader, this, ci);
                return;
            }
            if (c.sendLeft == 0)
            {
                Record(senderEnd, c.sendq.front().id, Simulator::Now().GetSeconds());
                c.sendq.pop_front();
                if (!c.sendq.empty())
                    c.sendLeft = c.sendq.front().bytes;
            }
        }
    }

    void Recv(Ptr<Socket> s)
    {
        auto it = connOfRx.find(PeekPointer(s));
        Ptr<Packet> p;
        Address from;
        while ((p = s->RecvFrom(from)))
        {
            if (it == connOfRx.end())
                continue;
            Conn& c = conns[it->second];
            uint64_t n = p->GetSize();
            while (n > 0 && !c.recvq.empty())
            {
                Msg& m = c.recvq.front();
                if (c.recvGot == 0)
                    Record(firstByte, m.id, Simulator::Now().GetSeconds());
                uint64_t take = std::min<uint64_t>(n, m.bytes - c.recvGot);
                c.recvGot += take;
                n -= take;
                if (c.recvGot == m.bytes)
                {
                    int64_t id = m.id;
                    Record(endAt, id, Simulator::Now().GetSeconds());
                    c.recvq.pop_front();
                    c.recvGot = 0;
                    if (ackBytes)
                        s->Send(Create<Packet>(ackBytes));
                    if (onDelivered)
                        onDelivered(id);
                }
            }
        }
    }

    // ------------------------------------------------------------------ timers and results
    void Timer(double at, int64_t key)
    {
        Simulator::Schedule(std::max(Seconds(at) - Simulator::Now(), Seconds(0)), &Twin::FireTimer, this, key);
    }

    void FireTimer(int64_t key)
    {
        if (onTimer)
            onTimer(key);
    }

    // counters of every queue: switch ports in order, then NIC gates; flat [bytes, packets, drops, backlog]
    std::vector<uint64_t> Snapshot() const
    {
        std::vector<uint64_t> out;
        out.reserve(4 * (ports.size() + gates.size()));
        for (const auto& p : ports)
        {
            out.push_back(p.c.bytes);
            out.push_back(p.c.packets);
            out.push_back(p.c.drops);
            out.push_back(p.c.backlog);
        }
        for (const auto& g : gates)
        {
            out.push_back(g->c.bytes);
            out.push_back(g->c.packets);
            out.push_back(g->c.drops);
            out.push_back(g->c.backlog);
        }
        return out;
    }

    std::string Log() const { return log.str(); }

    double FirstByte(int64_t id) const { return Recorded(firstByte, id); }
    double End(int64_t id) const { return Recorded(endAt, id); }
    double SenderEnd(int64_t id) const { return Recorded(senderEnd, id); }

    std::vector<int> PortSwitch() const
    {
        std::vector<int> out;
        for (const auto& p : ports)
            out.push_back(p.sw);
        return out;
    }

    std::vector<int> PortNumber() const
    {
        std::vector<int> out;
        for (const auto& p : ports)
            out.push_back(txs[p.tx].port);
        return out;
    }
};

void Port::TrySend()
{
    if (paused || busy || q.empty() || bucketWait)
        return;
    Time w = bucket.Wait(q.front().size);
    if (!w.IsZero())
    {
        bucketWait = true;
        Simulator::Schedule(w, &Port::BucketReady, this);
        return;
    }
    Packeted x = q.front();
    q.pop_front();
    c.backlog -= x.size;
    c.bytes += x.size;
    c.packets++;
    inBytes[x.feeder] -= x.size;
    tw->switches[sw].total -= x.size;
    busy = true;
    dev->Send(x.p, dev->GetBroadcast(), 0x0800);
    tw->Dequeued(int(this - &tw->ports[0]));
}

void Port::TxEnd(Ptr<const Packet>)
{
    busy = false;
    Simulator::ScheduleNow(&Port::TrySend, this);
}

// events executed so far, for the speed figures
inline uint64_t Events() { return Simulator::GetEventCount(); }
inline void Run() { Simulator::Run(); }
inline void StopAt(double s) { Simulator::Stop(Seconds(s) - Simulator::Now()); }
inline void StopNow() { Simulator::Stop(); }
inline double Now() { return Simulator::Now().GetSeconds(); }
inline void Destroy() { Simulator::Destroy(); }

} // namespace tb
