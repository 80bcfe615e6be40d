// tierwise ns-3 validation peer: one TCP transfer over a point-to-point link.
//
// Benchmark / cross-check only: the tierwise Python package never depends on
// this program.  Built against Debian's libns3-dev (ns-3 3.37) by run.sh.
//
// Modes
//   bulk     BulkSendApplication (node 0) -> PacketSink (node 1), size bytes.
//            Completion = time the sink has received all bytes.
//   flows    competing bulk flows over one bottleneck (a dumbbell, one sender
//            node per flow; see RunFlows): per-flow goodput over its duration.
//   reqresp  §12.3.2-style request/response on one connection: the client
//            (node 0) uploads size bytes over the "up" link, the server
//            (node 1) waits proc seconds after the last byte arrives, then
//            sends resp bytes back over the "down" link.  Completion = time
//            the client has received the whole response.
//
// Output: one JSON object on stdout (single line).  Everything else -> stderr.

#include "ns3/applications-module.h"
#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include <chrono>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

using namespace ns3;

namespace
{

// ----------------------------------------------------------------- state --
struct Stats
{
    // sender side (node 0 device, MacTx = handed from IP to the device; PPP
    // header already added)
    double synTime = -1;
    double firstDataTime = -1;
    uint64_t dataSegmentsSent = 0;
    uint64_t dataBytesSent = 0; // payload bytes incl. retransmissions
    uint64_t retransmittedSegments = 0;
    SequenceNumber32 highTx{0};
    bool highTxInit = false;

    // wire (PhyTxBegin: includes the 2-byte PPP header)
    uint64_t wireBytes[2] = {0, 0};   // [0] node0->node1, [1] node1->node0
    uint64_t wirePackets[2] = {0, 0};
    uint32_t dataWireMax[2] = {0, 0}; // biggest packet carrying payload
    std::map<uint32_t, uint64_t> pureAckSizes[2];

    // losses / queues
    uint64_t errorModelDrops = 0; // RateErrorModel drops at node 1's device
    uint64_t queueDrops[2] = {0, 0};
    uint32_t maxQueuePackets[2] = {0, 0};

    // congestion control (sender socket)
    uint32_t maxCwnd = 0;
    uint32_t lastCwnd = 0;
    uint64_t enterRecovery = 0;
    uint64_t enterLoss = 0; // RTO expiries (CA_LOSS entries)

    // receiver
    uint64_t rxBytes = 0;
    double completion = -1;

    // reqresp
    uint64_t upRxBytes = 0;
    double upDoneTime = -1;
    double respStartTime = -1;
};

Stats g;
uint64_t g_size = 30000000;
uint64_t g_resp = 5000000;
double g_proc = 0.3;
std::string g_mode = "bulk";

double
NowS()
{
    return Simulator::Now().GetSeconds();
}

// Parse a packet as seen at MacTx (IPv4 + TCP, no PPP) or PhyTxBegin (PPP +
// IPv4 + TCP).  Returns false if it is not TCP over IPv4.
bool
ParseTcp(Ptr<const Packet> p, bool hasPpp, TcpHeader& tcp, uint32_t& payload)
{
    Ptr<Packet> c = p->Copy();
    if (hasPpp)
    {
        PppHeader ppp;
        c->RemoveHeader(ppp);
    }
    Ipv4Header ip;
    c->RemoveHeader(ip);
    if (ip.GetProtocol() != 6)
    {
        return false;
    }
    c->RemoveHeader(tcp);
    payload = c->GetSize();
    return true;
}

bool g_instrument = true;

void
SenderMacTx(Ptr<const Packet> p)
{
    if (!g_instrument && g.firstDataTime >= 0)
    {
        return; // light mode: only the SYN and first data segment are wanted
    }
    TcpHeader tcp;
    uint32_t payload = 0;
    if (!ParseTcp(p, true, tcp, payload))
    {
        return;
    }
    if ((tcp.GetFlags() & TcpHeader::SYN) && g.synTime < 0)
    {
        g.synTime = NowS();
    }
    if (payload > 0)
    {
        if (g.firstDataTime < 0)
        {
            g.firstDataTime = NowS();
        }
        g.dataSegmentsSent++;
        g.dataBytesSent += payload;
        SequenceNumber32 end = tcp.GetSequenceNumber() + payload;
        if (!g.highTxInit)
        {
            g.highTx = end;
            g.highTxInit = true;
        }
        else if (tcp.GetSequenceNumber() < g.highTx)
        {
            g.retransmittedSegments++;
            if (end > g.highTx)
            {
                g.highTx = end;
            }
        }
        else
        {
            g.highTx = end;
        }
    }
}

void
PhyTxBegin(int dir, Ptr<const Packet> p)
{
    g.wireBytes[dir] += p->GetSize();
    g.wirePackets[dir]++;
    if (!g_instrument)
    {
        return;
    }
    TcpHeader tcp;
    uint32_t payload = 0;
    if (!ParseTcp(p, true, tcp, payload))
    {
        return;
    }
    if (payload > 0)
    {
        g.dataWireMax[dir] = std::max(g.dataWireMax[dir], p->GetSize());
    }
    else if (!(tcp.GetFlags() & (TcpHeader::SYN | TcpHeader::FIN)))
    {
        g.pureAckSizes[dir][p->GetSize()]++;
    }
}

void
ErrorModelDrop(Ptr<const Packet>)
{
    g.errorModelDrops++;
}

void
QueueDrop(int dir, Ptr<const Packet>)
{
    g.queueDrops[dir]++;
}

// TrafficControlLayer "TcDrop": no queue disc installed and the device queue
// is stopped (full) -> the packet is dropped before reaching the device.  With
// the root queue disc removed this is how a full DropTail device queue drops.
void
TcDrop(int dir, Ptr<const Packet>)
{
    g.queueDrops[dir]++;
}

void
QueueLen(int dir, uint32_t, uint32_t n)
{
    g.maxQueuePackets[dir] = std::max(g.maxQueuePackets[dir], n);
}

// optional per-change trace of the sender's TCP state (--traceFile)
std::FILE* g_trace = nullptr;

void
TraceLine(const char* what, double v)
{
    if (g_trace)
    {
        std::fprintf(g_trace, "%.9f,%s,%.9g\n", NowS(), what, v);
    }
}

void
CwndChange(uint32_t, uint32_t n)
{
    g.lastCwnd = n;
    g.maxCwnd = std::max(g.maxCwnd, n);
    TraceLine("cwnd", n);
}

void
SsthreshChange(uint32_t, uint32_t n)
{
    TraceLine("ssthresh", n);
}

void
InflightChange(uint32_t, uint32_t n)
{
    TraceLine("inflight", n);
}

void
RttChange(Time, Time n)
{
    TraceLine("rtt", n.GetSeconds());
}

void
PacingRateChange(DataRate, DataRate n)
{
    TraceLine("pacing_bps", n.GetBitRate());
}

void
RtoChange(Time, Time n)
{
    TraceLine("rto", n.GetSeconds());
}

void
CongStateChange(TcpSocketState::TcpCongState_t, TcpSocketState::TcpCongState_t n)
{
    TraceLine("state", n); // 0 open, 1 disorder, 2 cwr, 3 recovery, 4 loss
    if (n == TcpSocketState::CA_RECOVERY)
    {
        g.enterRecovery++;
    }
    else if (n == TcpSocketState::CA_LOSS)
    {
        g.enterLoss++;
    }
}

void
HookSocket(Ptr<Socket> s)
{
    Ptr<TcpSocketBase> t = DynamicCast<TcpSocketBase>(s);
    if (!t)
    {
        std::cerr << "warning: sender socket is not a TcpSocketBase\n";
        return;
    }
    t->TraceConnectWithoutContext("CongestionWindow", MakeCallback(&CwndChange));
    t->TraceConnectWithoutContext("CongState", MakeCallback(&CongStateChange));
    if (g_trace)
    {
        t->TraceConnectWithoutContext("SlowStartThreshold", MakeCallback(&SsthreshChange));
        t->TraceConnectWithoutContext("BytesInFlight", MakeCallback(&InflightChange));
        t->TraceConnectWithoutContext("RTT", MakeCallback(&RttChange));
        t->TraceConnectWithoutContext("RTO", MakeCallback(&RtoChange));
        t->TraceConnectWithoutContext("PacingRate", MakeCallback(&PacingRateChange));
    }
}

void
HookBulkSocket(Ptr<BulkSendApplication> app)
{
    HookSocket(app->GetSocket());
}

uint64_t g_nextRxMark = 0;

void
RxProgress()
{
    // one "rx" line per 1 % of the transfer in the trace file
    uint64_t total = g_mode == "bulk" ? g_size : g_resp;
    while (g_trace && g.rxBytes >= g_nextRxMark && g_nextRxMark <= total)
    {
        TraceLine("rx", g.rxBytes);
        g_nextRxMark += std::max<uint64_t>(total / 100, 1);
    }
}

void
SinkRx(Ptr<const Packet> p, const Address&)
{
    g.rxBytes += p->GetSize();
    RxProgress();
    if (g.completion < 0 && g.rxBytes >= g_size)
    {
        g.completion = NowS();
        Simulator::Stop();
    }
}

// ------------------------------------------------------------ reqresp app --
Ptr<Socket> g_client;
Ptr<Socket> g_serverConn;

void
SendResponse()
{
    g.respStartTime = NowS();
    int r = g_serverConn->Send(Create<Packet>(g_resp));
    if (r < 0)
    {
        std::cerr << "error: server Send failed (SndBufSize too small?)\n";
    }
}

void
ServerRecv(Ptr<Socket> s)
{
    Ptr<Packet> p;
    while ((p = s->Recv()))
    {
        if (p->GetSize() == 0)
        {
            break;
        }
        g.upRxBytes += p->GetSize();
    }
    if (g.upDoneTime < 0 && g.upRxBytes >= g_size)
    {
        g.upDoneTime = NowS();
        Simulator::Schedule(Seconds(g_proc), &SendResponse);
    }
}

void
ServerAccept(Ptr<Socket> s, const Address&)
{
    g_serverConn = s;
    s->SetRecvCallback(MakeCallback(&ServerRecv));
}

void
ClientRecv(Ptr<Socket> s)
{
    Ptr<Packet> p;
    while ((p = s->Recv()))
    {
        if (p->GetSize() == 0)
        {
            break;
        }
        g.rxBytes += p->GetSize();
    }
    RxProgress();
    if (g.completion < 0 && g.rxBytes >= g_resp)
    {
        g.completion = NowS();
        Simulator::Stop();
    }
}

void
ClientConnected(Ptr<Socket> s)
{
    int r = s->Send(Create<Packet>(g_size));
    if (r < 0)
    {
        std::cerr << "error: client Send failed (SndBufSize too small?)\n";
    }
}

void
ClientConnectFailed(Ptr<Socket>)
{
    std::cerr << "error: connection failed\n";
}

// ---------------------------------------------------------------- output --
std::string
Json(double v)
{
    if (v < 0)
    {
        return "null";
    }
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.9f", v);
    return buf;
}

std::string
JsonStr(const std::string& s)
{
    return "\"" + s + "\""; // our strings never need escaping
}

std::string
AckHist(int dir)
{
    std::ostringstream o;
    o << "{";
    bool first = true;
    for (auto& kv : g.pureAckSizes[dir])
    {
        o << (first ? "" : ", ") << "\"" << kv.first << "\": " << kv.second;
        first = false;
    }
    o << "}";
    return o.str();
}

uint32_t
ModeAck(int dir)
{
    uint32_t best = 0;
    uint64_t n = 0;
    for (auto& kv : g.pureAckSizes[dir])
    {
        if (kv.second > n)
        {
            n = kv.second;
            best = kv.first;
        }
    }
    return best;
}


// ---------------------------------------------------------------- flows --
// mode=flows: a dumbbell.  One sender node per flow, each on its own access
// link (10 Gbit/s, no delay, a queue that never fills) into router R1; the
// bottleneck R1 -> R2 at --rate with --delayMs and the --queue DropTail queue
// (the only queue that ever holds packets); R2 -> one sink node with a port
// per flow.  ACKs return the same way.  Each flow is "cc:start_s:duration_s"
// in --flows, comma separated; it runs a BulkSendApplication with no size
// limit from start to start + duration.  Per flow: bytes received by its
// sink at its end time, and goodput over its duration.
struct FlowRun
{
    std::string cc;
    double start = 0;
    double duration = 0;
    uint64_t rxBytes = 0;
    uint64_t rxAtEnd = 0;
    uint64_t recoveries = 0; // CA_RECOVERY entries of the sender
    uint64_t timeouts = 0;   // CA_LOSS entries (RTO expiries) of the sender
    // the sender's latest traced values, for the --traceFile samples
    uint32_t cwnd = 0;
    uint32_t inflight = 0;
    double pacingBps = 0;
    double rttS = 0;
    int caState = 0;
};

std::vector<FlowRun> g_flows;
uint64_t g_bottleneckData = 0;

void
FlowSinkRx(uint32_t i, Ptr<const Packet> p, const Address&)
{
    g_flows[i].rxBytes += p->GetSize();
}

void
FlowCwnd(uint32_t i, uint32_t, uint32_t n)
{
    g_flows[i].cwnd = n;
}

void
FlowInflight(uint32_t i, uint32_t, uint32_t n)
{
    g_flows[i].inflight = n;
}

void
FlowPacing(uint32_t i, DataRate, DataRate n)
{
    g_flows[i].pacingBps = n.GetBitRate();
}

void
FlowRtt(uint32_t i, Time, Time n)
{
    g_flows[i].rttS = n.GetSeconds();
}

// --traceFile in flows mode: every sample period, one CSV row per flow
// (time_s,flow,delivered_bytes,cwnd_bytes,inflight_bytes,pacing_bps,rtt_s,ca_state,queue_packets)
void
FlowSample(Ptr<Queue<Packet>> queue, Time period)
{
    uint32_t q = queue->GetNPackets();
    for (uint32_t i = 0; i < g_flows.size(); i++)
    {
        const FlowRun& f = g_flows[i];
        std::fprintf(g_trace,
                     "%.6f,%u,%llu,%u,%u,%.0f,%.6f,%d,%u\n",
                     NowS(),
                     i,
                     (unsigned long long)f.rxBytes,
                     f.cwnd,
                     f.inflight,
                     f.pacingBps,
                     f.rttS,
                     f.caState,
                     q);
    }
    Simulator::Schedule(period, &FlowSample, queue, period);
}

void
FlowCongState(uint32_t i, TcpSocketState::TcpCongState_t, TcpSocketState::TcpCongState_t n)
{
    g_flows[i].caState = n;
    if (n == TcpSocketState::CA_RECOVERY)
    {
        g_flows[i].recoveries++;
    }
    else if (n == TcpSocketState::CA_LOSS)
    {
        g_flows[i].timeouts++;
    }
}

void
HookFlowSocket(uint32_t i, Ptr<BulkSendApplication> app)
{
    Ptr<TcpSocketBase> t = DynamicCast<TcpSocketBase>(app->GetSocket());
    if (t)
    {
        t->TraceConnectWithoutContext("CongState", MakeBoundCallback(&FlowCongState, i));
        if (g_trace)
        {
            t->TraceConnectWithoutContext("CongestionWindow", MakeBoundCallback(&FlowCwnd, i));
            t->TraceConnectWithoutContext("BytesInFlight", MakeBoundCallback(&FlowInflight, i));
            t->TraceConnectWithoutContext("PacingRate", MakeBoundCallback(&FlowPacing, i));
            t->TraceConnectWithoutContext("RTT", MakeBoundCallback(&FlowRtt, i));
        }
    }
}

void
FlowEnd(uint32_t i)
{
    g_flows[i].rxAtEnd = g_flows[i].rxBytes;
}

void
BottleneckTx(Ptr<const Packet> p)
{
    if (p->GetSize() > 200)
    {
        g_bottleneckData++; // a data segment (ACKs are 54-66 B on the wire)
    }
}

bool
ParseFlows(const std::string& spec)
{
    std::stringstream all(spec);
    std::string item;
    while (std::getline(all, item, ','))
    {
        FlowRun f;
        std::stringstream one(item);
        std::string start, duration;
        if (!std::getline(one, f.cc, ':') || !std::getline(one, start, ':') ||
            !std::getline(one, duration, ':'))
        {
            return false;
        }
        f.start = std::stod(start);
        f.duration = std::stod(duration);
        if (f.start < 0 || f.duration <= 0)
        {
            return false;
        }
        g_flows.push_back(f);
    }
    return !g_flows.empty();
}

int
RunFlows(std::chrono::steady_clock::time_point t0,
         const std::string& rate,
         double delayMs,
         uint32_t queuePackets,
         uint32_t sendSize)
{
    uint32_t n = g_flows.size();
    NodeContainer senders, routers, sink;
    senders.Create(n);
    routers.Create(2);
    sink.Create(1);
    InternetStackHelper stack;
    stack.Install(senders);
    stack.Install(routers);
    stack.Install(sink);

    PointToPointHelper access;
    access.SetDeviceAttribute("DataRate", StringValue("10Gbps"));
    access.SetChannelAttribute("Delay", TimeValue(Seconds(0)));
    access.SetQueue("ns3::DropTailQueue<Packet>",
                    "MaxSize",
                    QueueSizeValue(QueueSize(QueueSizeUnit::PACKETS, 1000000)));
    PointToPointHelper neck;
    neck.SetDeviceAttribute("DataRate", StringValue(rate));
    neck.SetChannelAttribute("Delay", TimeValue(MicroSeconds(int64_t(delayMs * 1000.0 + 0.5))));
    neck.SetQueue("ns3::DropTailQueue<Packet>",
                  "MaxSize",
                  QueueSizeValue(QueueSize(QueueSizeUnit::PACKETS, queuePackets)));

    Ipv4AddressHelper addr;
    TrafficControlHelper tch;
    NetDeviceContainer bottleneck = neck.Install(routers.Get(0), routers.Get(1));
    addr.SetBase("10.2.0.0", "255.255.255.0");
    addr.Assign(bottleneck);
    tch.Uninstall(bottleneck);
    NetDeviceContainer out = access.Install(routers.Get(1), sink.Get(0));
    addr.SetBase("10.3.0.0", "255.255.255.0");
    Ipv4InterfaceContainer sinkIf = addr.Assign(out);
    tch.Uninstall(out);
    for (uint32_t i = 0; i < n; i++)
    {
        NetDeviceContainer d = access.Install(senders.Get(i), routers.Get(0));
        std::ostringstream base;
        base << "10." << (10 + i / 250) << "." << (i % 250) << ".0";
        addr.SetBase(base.str().c_str(), "255.255.255.0");
        addr.Assign(d);
        tch.Uninstall(d);
    }
    Ipv4GlobalRoutingHelper::PopulateRoutingTables();
    bottleneck.Get(0)->TraceConnectWithoutContext("PhyTxBegin", MakeCallback(&BottleneckTx));

    double stop = 0;
    for (uint32_t i = 0; i < n; i++)
    {
        FlowRun& f = g_flows[i];
        std::string ccType = f.cc.rfind("ns3::", 0) == 0 ? f.cc : "ns3::Tcp" + f.cc;
        TypeId tid;
        if (!TypeId::LookupByNameFailSafe(ccType, &tid))
        {
            std::cerr << "error: unknown congestion control " << ccType << "\n";
            return 2;
        }
        std::ostringstream path;
        path << "/NodeList/" << senders.Get(i)->GetId() << "/$ns3::TcpL4Protocol/SocketType";
        Config::Set(path.str(), TypeIdValue(tid));
        uint16_t port = 5000 + i;
        BulkSendHelper bulk("ns3::TcpSocketFactory",
                            InetSocketAddress(sinkIf.GetAddress(1), port));
        bulk.SetAttribute("MaxBytes", UintegerValue(0));
        bulk.SetAttribute("SendSize", UintegerValue(sendSize));
        ApplicationContainer sa = bulk.Install(senders.Get(i));
        sa.Start(Seconds(f.start));
        sa.Stop(Seconds(f.start + f.duration));
        PacketSinkHelper ps("ns3::TcpSocketFactory", InetSocketAddress(Ipv4Address::GetAny(), port));
        ApplicationContainer ra = ps.Install(sink.Get(0));
        ra.Start(Seconds(0.0));
        ra.Get(0)->TraceConnectWithoutContext("Rx", MakeBoundCallback(&FlowSinkRx, i));
        Simulator::Schedule(Seconds(f.start + f.duration), &FlowEnd, i);
        Simulator::Schedule(Seconds(f.start) + NanoSeconds(1),
                            &HookFlowSocket,
                            i,
                            DynamicCast<BulkSendApplication>(sa.Get(0)));
        stop = std::max(stop, f.start + f.duration);
    }
    if (g_trace)
    {
        std::fprintf(g_trace,
                     "time_s,flow,delivered_bytes,cwnd_bytes,inflight_bytes,pacing_bps,rtt_s,"
                     "ca_state,queue_packets\n");
        Ptr<PointToPointNetDevice> dev = DynamicCast<PointToPointNetDevice>(bottleneck.Get(0));
        Simulator::Schedule(Seconds(0), &FlowSample, dev->GetQueue(), MilliSeconds(100));
    }
    Simulator::Stop(Seconds(stop) + NanoSeconds(1));
    auto t1 = std::chrono::steady_clock::now();
    Simulator::Run();
    auto t2 = std::chrono::steady_clock::now();
    uint64_t events = Simulator::GetEventCount();
    Simulator::Destroy();
    auto t3 = std::chrono::steady_clock::now();

    std::ostringstream o;
    o << "{\"tool\": \"ns-3\", \"ns3_version\": \"3.37\", \"mode\": \"flows\", "
      << "\"rate\": " << JsonStr(rate) << ", \"one_way_delay_ms\": " << delayMs
      << ", \"queue_packets\": " << queuePackets << ", \"flows\": [";
    for (uint32_t i = 0; i < n; i++)
    {
        const FlowRun& f = g_flows[i];
        o << (i ? ", " : "") << "{\"cc\": " << JsonStr(f.cc) << ", \"start_s\": " << f.start
          << ", \"duration_s\": " << f.duration << ", \"delivered_bytes\": " << f.rxAtEnd
          << ", \"goodput_bytes_per_s\": " << Json(f.rxAtEnd / f.duration)
          << ", \"fast_recoveries\": " << f.recoveries << ", \"timeouts\": " << f.timeouts << "}";
    }
    o << "], \"bottleneck_data_packets\": " << g_bottleneckData << ", \"events\": " << events
      << ", \"wall_s\": " << Json(std::chrono::duration<double>(t2 - t1).count())
      << ", \"wall_total_s\": " << Json(std::chrono::duration<double>(t3 - t0).count()) << "}";
    std::cout << o.str() << std::endl;
    return 0;
}

} // namespace

int
main(int argc, char* argv[])
{
    auto t0 = std::chrono::steady_clock::now();

    std::string cc = "NewReno";
    double loss = 0.0;
    uint32_t seed = 1;
    std::string rateUp = "20Mbps";
    std::string rateDown = "";
    double delayMs = 50.0;
    uint32_t segment = 1168;
    uint32_t iw = 10;
    uint32_t delAck = 1;
    uint32_t queuePackets = 100000;
    uint32_t sndBuf = 1u << 27; // 128 MiB
    uint32_t rcvBuf = 1u << 27;
    std::string recovery = "prr";
    bool sack = true;
    bool timestamps = true;
    bool hystart = true;
    uint32_t dataRetries = 100;
    uint32_t sendSize = 1u << 16;
    double stopTime = 36000.0;
    uint64_t size = 30000000;
    uint64_t resp = 5000000;
    double proc = 0.3;
    std::string mode = "bulk";
    uint32_t padBytes = 0;

    CommandLine cmd(__FILE__);
    cmd.AddValue("mode", "bulk | reqresp | flows", mode);
    std::string flowsSpec;
    cmd.AddValue("flows", "flows mode: cc:start_s:duration_s,... (one sender node each)", flowsSpec);
    cmd.AddValue("cc", "NewReno | Cubic | Bbr (or any ns3::Tcp* congestion op)", cc);
    cmd.AddValue("loss", "packet loss rate on node 1's receive side (data direction)", loss);
    cmd.AddValue("seed", "RngRun (RngSeed stays 1)", seed);
    cmd.AddValue("size", "payload bytes node0 -> node1", size);
    cmd.AddValue("resp", "reqresp: response bytes node1 -> node0", resp);
    cmd.AddValue("proc", "reqresp: server processing time (s)", proc);
    cmd.AddValue("rate", "data rate node0 -> node1", rateUp);
    cmd.AddValue("rateDown", "data rate node1 -> node0 (default: same as rate)", rateDown);
    cmd.AddValue("delayMs", "one-way propagation delay (ms)", delayMs);
    cmd.AddValue("segment", "TCP SegmentSize (payload bytes)", segment);
    cmd.AddValue("iw", "TCP InitialCwnd (segments)", iw);
    cmd.AddValue("delAck", "TcpSocket::DelAckCount (1 = ACK every packet)", delAck);
    cmd.AddValue("queue", "device DropTail queue size, packets, each direction", queuePackets);
    cmd.AddValue("sndBuf", "TcpSocket::SndBufSize (bytes)", sndBuf);
    cmd.AddValue("rcvBuf", "TcpSocket::RcvBufSize (bytes)", rcvBuf);
    cmd.AddValue("recovery", "prr (ns-3 default) | classic", recovery);
    cmd.AddValue("sack", "TcpSocketBase::Sack", sack);
    cmd.AddValue("timestamps", "TcpSocketBase::Timestamp", timestamps);
    cmd.AddValue("hystart", "TcpCubic::HyStart", hystart);
    cmd.AddValue("dataRetries", "TcpSocket::DataRetries", dataRetries);
    cmd.AddValue("sendSize", "BulkSendApplication::SendSize", sendSize);
    cmd.AddValue("instrument",
                 "parse every packet for retransmission/ACK-size stats (false = light: "
                 "only counters, for wall-time benchmarks)",
                 g_instrument);
    std::string traceFile;
    cmd.AddValue("traceFile",
                 "write the sender's cwnd/ssthresh/inflight/rtt/rto/state changes as CSV "
                 "(time_s,what,value); in flows mode, every 100 ms one row per flow "
                 "(delivered bytes, cwnd, inflight, pacing rate, RTT, state, queue)",
                 traceFile);
    cmd.AddValue("padBytes",
                 "add the airtime of N extra bytes after every packet (PPP InterframeGap), "
                 "to emulate a model with bigger headers; 0 = off",
                 padBytes);
    cmd.AddValue("stopTime", "give up after this many simulated seconds", stopTime);
    cmd.Parse(argc, argv);
    if (!traceFile.empty())
    {
        g_trace = std::fopen(traceFile.c_str(), "w");
        if (!g_trace)
        {
            std::cerr << "error: cannot open " << traceFile << "\n";
            return 2;
        }
        if (mode != "flows") // flows mode writes its own per-flow samples
        {
            std::fprintf(g_trace, "time_s,what,value\n");
        }
    }
    if (rateDown.empty())
    {
        rateDown = rateUp;
    }
    g_size = size;
    g_resp = resp;
    g_proc = proc;
    g_mode = mode;
    if (mode != "bulk" && mode != "reqresp" && mode != "flows")
    {
        std::cerr << "error: --mode must be bulk, reqresp or flows\n";
        return 2;
    }
    if (mode == "flows" && !ParseFlows(flowsSpec))
    {
        std::cerr << "error: --flows must be cc:start_s:duration_s[,...] with duration > 0\n";
        return 2;
    }
    if (loss < 0 || loss >= 1)
    {
        std::cerr << "error: --loss must be in [0, 1)\n";
        return 2;
    }

    RngSeedManager::SetSeed(1);
    RngSeedManager::SetRun(seed);

    std::string ccType = cc.rfind("ns3::", 0) == 0 ? cc : "ns3::Tcp" + cc;
    TypeId ccTid;
    if (!TypeId::LookupByNameFailSafe(ccType, &ccTid))
    {
        std::cerr << "error: unknown congestion control " << ccType << "\n";
        return 2;
    }
    Config::SetDefault("ns3::TcpL4Protocol::SocketType", TypeIdValue(ccTid));
    if (recovery == "classic")
    {
        Config::SetDefault("ns3::TcpL4Protocol::RecoveryType",
                           TypeIdValue(TypeId::LookupByName("ns3::TcpClassicRecovery")));
    }
    else if (recovery == "prr")
    {
        Config::SetDefault("ns3::TcpL4Protocol::RecoveryType",
                           TypeIdValue(TypeId::LookupByName("ns3::TcpPrrRecovery")));
    }
    else
    {
        std::cerr << "error: --recovery must be prr or classic\n";
        return 2;
    }
    Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(segment));
    Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(iw));
    Config::SetDefault("ns3::TcpSocket::DelAckCount", UintegerValue(delAck));
    Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(sndBuf));
    Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(rcvBuf));
    Config::SetDefault("ns3::TcpSocket::DataRetries", UintegerValue(dataRetries));
    Config::SetDefault("ns3::TcpSocketBase::Sack", BooleanValue(sack));
    Config::SetDefault("ns3::TcpSocketBase::Timestamp", BooleanValue(timestamps));
    Config::SetDefault("ns3::TcpCubic::HyStart", BooleanValue(hystart));

    if (mode == "flows")
    {
        return RunFlows(t0, rateUp, delayMs, queuePackets, sendSize);
    }

    // ------------------------------------------------------------ topology --
    NodeContainer nodes;
    nodes.Create(2);

    PointToPointHelper p2p;
    p2p.SetDeviceAttribute("DataRate", StringValue(rateUp));
    p2p.SetChannelAttribute("Delay", TimeValue(MicroSeconds(int64_t(delayMs * 1000.0 + 0.5))));
    p2p.SetQueue("ns3::DropTailQueue<Packet>",
                 "MaxSize",
                 QueueSizeValue(QueueSize(QueueSizeUnit::PACKETS, queuePackets)));
    NetDeviceContainer dev = p2p.Install(nodes);
    dev.Get(1)->SetAttribute("DataRate", StringValue(rateDown));
    if (padBytes > 0)
    {
        dev.Get(0)->SetAttribute("InterframeGap",
                                 TimeValue(DataRate(rateUp).CalculateBytesTxTime(padBytes)));
        dev.Get(1)->SetAttribute("InterframeGap",
                                 TimeValue(DataRate(rateDown).CalculateBytesTxTime(padBytes)));
    }

    InternetStackHelper stack;
    stack.Install(nodes);
    Ipv4AddressHelper addr;
    addr.SetBase("10.1.1.0", "255.255.255.0");
    Ipv4InterfaceContainer ifc = addr.Assign(dev);
    // Ipv4AddressHelper::Assign installs the default root queue disc
    // (FqCoDel); remove it so the only queue is the device's DropTail.
    TrafficControlHelper tch;
    tch.Uninstall(dev);

    if (loss > 0)
    {
        Ptr<RateErrorModel> em = CreateObject<RateErrorModel>();
        em->SetAttribute("ErrorRate", DoubleValue(loss));
        em->SetAttribute("ErrorUnit", EnumValue(RateErrorModel::ERROR_UNIT_PACKET));
        em->AssignStreams(1000);
        dev.Get(1)->SetAttribute("ReceiveErrorModel", PointerValue(em));
    }

    // --------------------------------------------------------------- traces --
    dev.Get(0)->TraceConnectWithoutContext("MacTx", MakeCallback(&SenderMacTx));
    for (int d = 0; d < 2; d++)
    {
        nodes.Get(d)->GetObject<TrafficControlLayer>()->TraceConnectWithoutContext(
            "TcDrop",
            MakeBoundCallback(&TcDrop, d));
    }
    dev.Get(0)->TraceConnectWithoutContext("PhyTxBegin", MakeBoundCallback(&PhyTxBegin, 0));
    dev.Get(1)->TraceConnectWithoutContext("PhyTxBegin", MakeBoundCallback(&PhyTxBegin, 1));
    dev.Get(1)->TraceConnectWithoutContext("PhyRxDrop", MakeCallback(&ErrorModelDrop));
    for (int d = 0; d < 2; d++)
    {
        Ptr<Queue<Packet>> q = DynamicCast<PointToPointNetDevice>(dev.Get(d))->GetQueue();
        q->TraceConnectWithoutContext("Drop", MakeBoundCallback(&QueueDrop, d));
        q->TraceConnectWithoutContext("PacketsInQueue", MakeBoundCallback(&QueueLen, d));
    }

    // ----------------------------------------------------------- workload --
    uint16_t port = 5000;
    const double start = 0.0;
    if (mode == "bulk")
    {
        BulkSendHelper bulk("ns3::TcpSocketFactory", InetSocketAddress(ifc.GetAddress(1), port));
        bulk.SetAttribute("MaxBytes", UintegerValue(size));
        bulk.SetAttribute("SendSize", UintegerValue(sendSize));
        ApplicationContainer sa = bulk.Install(nodes.Get(0));
        sa.Start(Seconds(start));

        PacketSinkHelper sink("ns3::TcpSocketFactory",
                              InetSocketAddress(Ipv4Address::GetAny(), port));
        ApplicationContainer ra = sink.Install(nodes.Get(1));
        ra.Start(Seconds(0.0));
        ra.Get(0)->TraceConnectWithoutContext("Rx", MakeCallback(&SinkRx));

        // the socket exists once StartApplication has run
        Simulator::Schedule(Seconds(start) + NanoSeconds(1),
                            &HookBulkSocket,
                            DynamicCast<BulkSendApplication>(sa.Get(0)));
    }
    else
    {
        Ptr<Socket> listen = Socket::CreateSocket(nodes.Get(1), TcpSocketFactory::GetTypeId());
        listen->Bind(InetSocketAddress(Ipv4Address::GetAny(), port));
        listen->Listen();
        listen->SetAcceptCallback(MakeNullCallback<bool, Ptr<Socket>, const Address&>(),
                                  MakeCallback(&ServerAccept));

        g_client = Socket::CreateSocket(nodes.Get(0), TcpSocketFactory::GetTypeId());
        g_client->Bind();
        g_client->SetConnectCallback(MakeCallback(&ClientConnected),
                                     MakeCallback(&ClientConnectFailed));
        g_client->SetRecvCallback(MakeCallback(&ClientRecv));
        HookSocket(g_client);
        Simulator::Schedule(Seconds(start), [&]() {
            g_client->Connect(InetSocketAddress(ifc.GetAddress(1), port));
        });
    }

    Simulator::Stop(Seconds(stopTime));
    auto t1 = std::chrono::steady_clock::now();
    Simulator::Run();
    auto t2 = std::chrono::steady_clock::now();
    uint64_t events = Simulator::GetEventCount();
    double simEnd = NowS();
    Simulator::Destroy();
    auto t3 = std::chrono::steady_clock::now();

    double wallRun = std::chrono::duration<double>(t2 - t1).count();
    double wallTotal = std::chrono::duration<double>(t3 - t0).count();
    bool completed = g.completion >= 0;
    double fromSyn = completed && g.synTime >= 0 ? g.completion - g.synTime : -1;
    double fromData = completed && g.firstDataTime >= 0 ? g.completion - g.firstDataTime : -1;
    uint64_t uniqueSegs = (size + segment - 1) / segment;
    auto orNull = [](bool ok, uint64_t v) { return ok ? std::to_string(v) : std::string("null"); };

    std::ostringstream o;
    o << "{"
      << "\"tool\": \"ns-3\", \"ns3_version\": \"3.37\", "
      << "\"mode\": " << JsonStr(mode) << ", "
      << "\"cc\": " << JsonStr(cc) << ", "
      << "\"loss\": " << loss << ", "
      << "\"seed\": " << seed << ", "
      << "\"size_bytes\": " << size << ", "
      << "\"resp_bytes\": " << (mode == "reqresp" ? std::to_string(resp) : "null") << ", "
      << "\"rate\": " << JsonStr(rateUp) << ", "
      << "\"rate_down\": " << JsonStr(rateDown) << ", "
      << "\"one_way_delay_ms\": " << delayMs << ", "
      << "\"segment_bytes\": " << segment << ", "
      << "\"initial_cwnd\": " << iw << ", "
      << "\"del_ack_count\": " << delAck << ", "
      << "\"queue_packets\": " << queuePackets << ", "
      << "\"snd_buf\": " << sndBuf << ", "
      << "\"rcv_buf\": " << rcvBuf << ", "
      << "\"recovery\": " << JsonStr(recovery) << ", "
      << "\"sack\": " << (sack ? "true" : "false") << ", "
      << "\"timestamps\": " << (timestamps ? "true" : "false") << ", "
      << "\"pad_bytes\": " << padBytes << ", "
      << "\"completed\": " << (completed ? "true" : "false") << ", "
      << "\"completion_s\": " << Json(fromSyn) << ", "
      << "\"completion_from_first_data_s\": " << Json(fromData) << ", "
      << "\"syn_time_s\": " << Json(g.synTime) << ", "
      << "\"first_data_time_s\": " << Json(g.firstDataTime) << ", "
      << "\"done_time_s\": " << Json(g.completion) << ", "
      << "\"upload_done_time_s\": " << Json(g.upDoneTime) << ", "
      << "\"response_start_time_s\": " << Json(g.respStartTime) << ", "
      << "\"sim_end_s\": " << Json(simEnd) << ", "
      << "\"bytes\": " << g.rxBytes << ", "
      << "\"unique_data_segments\": " << uniqueSegs << ", "
      << "\"instrumented\": " << (g_instrument ? "true" : "false") << ", "
      << "\"data_segments_sent\": " << orNull(g_instrument, g.dataSegmentsSent) << ", "
      << "\"data_payload_bytes_sent\": " << orNull(g_instrument, g.dataBytesSent) << ", "
      << "\"retransmissions\": " << orNull(g_instrument, g.retransmittedSegments) << ", "
      << "\"error_model_drops\": " << g.errorModelDrops << ", "
      << "\"queue_drops_fwd\": " << g.queueDrops[0] << ", "
      << "\"queue_drops_rev\": " << g.queueDrops[1] << ", "
      << "\"max_queue_packets_fwd\": " << g.maxQueuePackets[0] << ", "
      << "\"max_queue_packets_rev\": " << g.maxQueuePackets[1] << ", "
      << "\"fast_recoveries\": " << g.enterRecovery << ", "
      << "\"timeouts\": " << g.enterLoss << ", "
      << "\"max_cwnd_bytes\": " << g.maxCwnd << ", "
      << "\"final_cwnd_bytes\": " << g.lastCwnd << ", "
      << "\"wire_bytes_fwd\": " << g.wireBytes[0] << ", "
      << "\"wire_bytes_rev\": " << g.wireBytes[1] << ", "
      << "\"wire_packets_fwd\": " << g.wirePackets[0] << ", "
      << "\"wire_packets_rev\": " << g.wirePackets[1] << ", "
      << "\"data_packet_wire_bytes\": " << orNull(g_instrument, g.dataWireMax[0]) << ", "
      << "\"ack_wire_bytes\": " << orNull(g_instrument, ModeAck(1)) << ", "
      << "\"ack_wire_bytes_hist\": " << (g_instrument ? AckHist(1) : "null") << ", "
      << "\"ack_wire_bytes_fwd_hist\": " << (g_instrument ? AckHist(0) : "null") << ", "
      << "\"events\": " << events << ", "
      << "\"wall_s\": " << Json(wallRun) << ", "
      << "\"wall_total_s\": " << Json(wallTotal) << "}";
    std::cout << o.str() << std::endl;
    if (g_trace)
    {
        std::fclose(g_trace);
    }
    return completed ? 0 : 1;
}
