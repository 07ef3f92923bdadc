//! The ERRORS tables of spec 4.4 (packet channels) and 4.5 (scalar channels), table-driven:
//! one row per (function, status, situation) that can be provoked. Every row runs; the
//! mismatches are collected and the test fails listing them all. A row that refuses a
//! connect, open, close or release also checks that the refusal changed nothing (status
//! flags of the endpoints involved, a queued scalar, a held packet), and the channels that
//! refused sends are drained at the end to prove that no refused packet or scalar went out.
//!
//! Nodes are threads of this process (as in `channels.rs`), on shm and on tcp (one test
//! each, one at a time; every row behaves the same on both): A and B (the channels), T (a
//! one-slot request table, kept full), D (finalized after its channels were opened: the
//! `MCAPI_ERR_NODE_NOTINIT` rows, and the "other side's node finalized" rows on A; a peer
//! that dies is in `channel_processes.rs`) and F (every channel side slot reserved).
//!
//! Rows NOT provokable through the Rust API, and why:
//! - `MCAPI_ERR_PARAMETER` (connect, open, `pktchan_send_i`, `pktchan_send`,
//!   `pktchan_recv_i`, `pktchan_recv`, `pktchan_release_test`, close): NULL request, handle,
//!   buffer or size pointers, or a NULL buffer with a size > 0. References and slices cannot
//!   be null; the C suite (`tests/c/suite.c`) passes NULLs through the C ABI.
//! - `MCAPI_ERR_ENDP_INVALID` for a value that is no endpoint descriptor at all:
//!   `EndpointId::from_raw` refuses a value whose check field is wrong, so every Rust
//!   `EndpointId` decodes (the C suite passes garbage). Endpoints that do not exist, both
//!   endpoints the same, another node's endpoint (opens) and an endpoint of a finalized node
//!   are rows here.
//! - `MCAPI_ERR_NODE_NOTINIT` before `initialize`: a `Node` value exists only once
//!   initialized. After `finalize` the value stays usable and every call must answer
//!   `MCAPI_ERR_NODE_NOTINIT`: those are the rows here (node D).
//! - `mcapi_pktchan_recv_i` `MCAPI_ERR_MEM_LIMIT`: a receive needs no memory (packets land in
//!   the pool posted at open); pending receives are bounded by the request table only
//!   (`MCAPI_ERR_REQUEST_LIMIT`, a row).
//! - `MCAPI_ERR_GENERAL` where `docs/implementation-defined.md` documents no case for the
//!   function: connect (only an unexpected control reply), `pktchan_send_i`, `pktchan_send`,
//!   `pktchan_recv_i`, `pktchan_recv` (the other side gone is `MCAPI_ERR_TRANSMISSION`
//!   there), both `available`, `pktchan_release`, `pktchan_release_test`.
//! - open `MCAPI_ERR_GENERAL` when the provider cannot open a fabric endpoint (`ep_cnt`
//!   exhausted): shm and tcp allow more endpoints than the 256 sides of a node; the
//!   256-sides limit is a row.
//! - scalar send `MCAPI_ERR_GENERAL` for a provider error other than the receiver being gone:
//!   no way to make the provider fail (the receiver closed is a row; its node gone, below).
//! - `MCAPI_ERR_ENDP_DELETED` at the call: an endpoint deleted before the open is no endpoint
//!   any more (`MCAPI_ERR_ENDP_INVALID`, as for messages in 4.3); the rows here delete the
//!   endpoint while its open is pending, and the open's request completes with it.

use mcapi::attributes::EndpointAttribute as Attr;
use mcapi::config::Config;
use mcapi::{ChannelHandle, EndpointId, Node, RequestHandle, Status};
use std::cell::Cell;
use std::sync::Mutex;
use std::time::{Duration, Instant};

static FABRIC: Mutex<()> = Mutex::new(());
const WAIT: Option<Duration> = Some(Duration::from_secs(10));
const STATUS: u32 = Attr::Status as u32;
const TIMEOUT: u32 = Attr::Timeout as u32;
/// Receive buffers of a channel (the sender's credits) on nodes A, B, T and D.
const BUFFERS: usize = 4;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    Pkt,
    Scl,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Dir {
    Tx,
    Rx,
}

use Dir::{Rx, Tx};
use Kind::{Pkt, Scl};

impl Kind {
    fn name(self, function: &str) -> String {
        match self {
            Pkt => format!("mcapi_pktchan_{function}"),
            Scl => format!("mcapi_sclchan_{function}"),
        }
    }

    fn flip(self) -> Kind {
        match self {
            Pkt => Scl,
            Scl => Pkt,
        }
    }

    fn other(self) -> &'static str {
        match self {
            Pkt => "scalar",
            Scl => "packet",
        }
    }
}

impl Dir {
    fn name(self) -> &'static str {
        match self {
            Tx => "send",
            Rx => "recv",
        }
    }

    fn role(self) -> &'static str {
        match self {
            Tx => "send",
            Rx => "receive",
        }
    }

    fn flip(self) -> Dir {
        match self {
            Tx => Rx,
            Rx => Tx,
        }
    }
}

fn connect_i(n: &Node, k: Kind, s: EndpointId, r: EndpointId) -> Result<RequestHandle, Status> {
    match k {
        Pkt => n.pktchan_connect_i(s, r),
        Scl => n.sclchan_connect_i(s, r),
    }
}

fn open_i(
    n: &Node,
    k: Kind,
    d: Dir,
    e: EndpointId,
) -> Result<(ChannelHandle, RequestHandle), Status> {
    match (k, d) {
        (Pkt, Tx) => n.pktchan_send_open_i(e),
        (Pkt, Rx) => n.pktchan_recv_open_i(e),
        (Scl, Tx) => n.sclchan_send_open_i(e),
        (Scl, Rx) => n.sclchan_recv_open_i(e),
    }
}

fn close_i(n: &Node, k: Kind, d: Dir, h: ChannelHandle) -> Result<RequestHandle, Status> {
    match (k, d) {
        (Pkt, Tx) => n.pktchan_send_close_i(h),
        (Pkt, Rx) => n.pktchan_recv_close_i(h),
        (Scl, Tx) => n.sclchan_send_close_i(h),
        (Scl, Rx) => n.sclchan_recv_close_i(h),
    }
}

fn config(provider: &str) -> Config {
    let mut c = Config::defaults();
    c.provider = Some(provider.into());
    c.job = format!("chanerr-{provider}-{}", std::process::id());
    c.recv_buffers = BUFFERS;
    c
}

fn offered(provider: &str) -> bool {
    let ok = mcapi_ofi::Info::first(&mcapi_ofi::Hints::new().provider(provider)).is_ok();
    if !ok {
        eprintln!("skipping: provider {provider} not offered");
    }
    ok
}

/// A local endpoint whose blocking channel calls give up after 3 s, so a wrong row fails
/// instead of hanging.
fn endpoint(n: &Node, port: u32) -> EndpointId {
    let e = n.endpoint_create(port).unwrap();
    n.endpoint_set_attribute(e, TIMEOUT, 3000).unwrap();
    e
}

fn connect(by: &Node, k: Kind, s: EndpointId, r: EndpointId) {
    let q = connect_i(by, k, s, r).unwrap();
    by.wait(q, None, WAIT).unwrap();
}

/// Connects `s` (of node `sn`) to `r` (of node `rn`), the connect made by `by`, and opens
/// both sides (receiver first, so no node has more than one request at a time).
fn channel(
    by: &Node,
    k: Kind,
    sn: &Node,
    s: EndpointId,
    rn: &Node,
    r: EndpointId,
) -> (ChannelHandle, ChannelHandle) {
    connect(by, k, s, r);
    let (hr, qr) = open_i(rn, k, Rx, r).unwrap();
    let (hs, qs) = open_i(sn, k, Tx, s).unwrap();
    sn.wait(qs, None, WAIT).unwrap();
    rn.wait(qr, None, WAIT).unwrap();
    (hs, hr)
}

/// Closes both sides and waits until the channel is disconnected.
fn disconnect(k: Kind, sn: &Node, hs: ChannelHandle, rn: &Node, hr: ChannelHandle) {
    let qs = close_i(sn, k, Tx, hs).unwrap();
    let qr = close_i(rn, k, Rx, hr).unwrap();
    rn.wait(qr, None, WAIT).unwrap();
    sn.wait(qs, None, WAIT).unwrap();
}

/// The next packet, also on a receiver whose endpoint timeout is short.
fn recv_packet(n: &Node, h: ChannelHandle) -> Result<mcapi::Packet, Status> {
    let start = Instant::now();
    loop {
        match n.pktchan_recv(h) {
            Err(Status::MCAPI_TIMEOUT) if start.elapsed() < Duration::from_secs(10) => {}
            r => return r,
        }
    }
}

fn until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(10), "setup: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The status flags of endpoints, as a probe of "nothing changed".
fn flags<'a>(eps: &[(&'a Node, EndpointId)]) -> impl Fn() -> String + 'a {
    let eps = eps.to_vec();
    move || {
        eps.iter()
            .map(|(n, e)| match n.endpoint_get_attribute(*e, STATUS) {
                Ok(f) => format!("{f:#x} "),
                Err(s) => format!("{s} "),
            })
            .collect()
    }
}

type Call<'a> = Box<dyn Fn() -> Result<(), Status> + 'a>;
type Probe<'a> = Box<dyn Fn() -> String + 'a>;

struct Row<'a> {
    function: String,
    want: Status,
    situation: String,
    call: Call<'a>,
    /// State that the refused call must leave as it found it.
    unchanged: Option<Probe<'a>>,
}

impl<'a> Row<'a> {
    fn keep(&mut self, probe: impl Fn() -> String + 'a) {
        self.unchanged = Some(Box::new(probe));
    }
}

#[derive(Default)]
struct Table<'a>(Vec<Row<'a>>);

impl<'a> Table<'a> {
    fn row(
        &mut self,
        function: impl Into<String>,
        want: Status,
        situation: impl Into<String>,
        call: impl Fn() -> Result<(), Status> + 'a,
    ) -> &mut Row<'a> {
        self.0.push(Row {
            function: function.into(),
            want,
            situation: situation.into(),
            call: Box::new(call),
            unchanged: None,
        });
        self.0.last_mut().expect("just pushed")
    }

    /// Runs every row; returns the mismatches.
    fn run(&self) -> Vec<String> {
        let mut wrong = Vec::new();
        for r in &self.0 {
            let before = r.unchanged.as_ref().map(|p| p());
            let got = (r.call)();
            if got != Err(r.want) {
                wrong.push(format!(
                    "{} ({}): expected {}, got {:?}",
                    r.function, r.situation, r.want, got
                ));
            }
            if let (Some(p), Some(before)) = (&r.unchanged, before) {
                let after = p();
                if after != before {
                    wrong.push(format!(
                        "{} ({}): the refused call changed state: {before}-> {after}",
                        r.function, r.situation
                    ));
                }
            }
        }
        wrong
    }
}

/// The handles of an open channel: (send, receive).
type Chan = (ChannelHandle, ChannelHandle);

#[test]
fn every_provokable_row_of_the_4_4_and_4_5_errors_tables_on_shm() {
    if offered("shm") {
        every_provokable_row("shm", 200);
    }
}

#[test]
fn every_provokable_row_of_the_4_4_and_4_5_errors_tables_on_tcp() {
    if offered("tcp") {
        every_provokable_row("tcp", 210);
    }
}

#[test]
fn every_provokable_row_of_the_4_4_and_4_5_errors_tables_on_sockets() {
    if offered("sockets") {
        every_provokable_row("sockets", 220);
    }
}

/// The table on `prov`, with nodes `base`..`base + 4` (each provider its own ids, so a
/// failed run's nodes never refuse the other's).
fn every_provokable_row(prov: &str, base: u32) {
    let _turn = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    let cfg = config(prov);
    let mut tiny = cfg.clone();
    tiny.request_table_size = 1;
    let mut few = cfg.clone();
    few.recv_buffers = 1;
    let (a, b, t, d, f) = (
        Node::initialize(0, base, cfg.clone()).unwrap(),
        Node::initialize(0, base + 1, cfg.clone()).unwrap(),
        Node::initialize(0, base + 2, tiny).unwrap(),
        Node::initialize(0, base + 3, cfg.clone()).unwrap(),
        Node::initialize(0, base + 4, few).unwrap(),
    );
    let (a, b, t, d, f) = (&a, &b, &t, &d, &f);

    // Unconnected endpoints: connects that must be refused name them, and leave them so.
    let free_tx = endpoint(a, 30);
    let free_rx = endpoint(b, 40);
    let ghost_a = EndpointId::encode(0, base, 998).unwrap();
    let ghost_b = EndpointId::encode(0, base + 1, 999).unwrap();
    let garbage = ChannelHandle::from_raw(0xdead_beef);

    // P: an open packet channel A -> B whose receiver times out after 100 ms; B holds one
    // packet and has released another.
    let p_tx = endpoint(a, 10);
    let p_rx = b.endpoint_create(20).unwrap();
    b.endpoint_set_attribute(p_rx, TIMEOUT, 100).unwrap();
    let p: Chan = channel(a, Pkt, a, p_tx, b, p_rx);
    a.pktchan_send(p.0, b"held").unwrap();
    a.pktchan_send(p.0, b"released").unwrap();
    let held = recv_packet(b, p.1).unwrap().addr();
    let released = recv_packet(b, p.1).unwrap();
    let released = (released.addr(), b.pktchan_release(released).unwrap()).0;
    let still_held = move || format!("{:?}", b.pktchan_release_test(held));

    // S, S2: open scalar channels A -> B with one 8-bit (S) or 64-bit (S2) scalar queued.
    let s_tx = endpoint(a, 11);
    let s_rx = endpoint(b, 21);
    let s: Chan = channel(b, Scl, a, s_tx, b, s_rx);
    a.sclchan_send(s.0, 0xAB, 1).unwrap();
    let s2_tx = endpoint(a, 16);
    let s2_rx = endpoint(b, 27);
    let s2: Chan = channel(a, Scl, a, s2_tx, b, s2_rx);
    a.sclchan_send(s2.0, u64::MAX - 1, 8).unwrap();
    until("scalars queued", || {
        b.sclchan_available(s.1) == Ok(1) && b.sclchan_available(s2.1) == Ok(1)
    });

    // PP: a packet channel connected, only its receiver opened; SP: a scalar channel
    // connected, only its sender opened.
    let pp_tx = endpoint(a, 12);
    let pp_rx = endpoint(b, 22);
    connect(a, Pkt, pp_tx, pp_rx);
    let (pp_hr, _) = b.pktchan_recv_open_i(pp_rx).unwrap();
    let sp_tx = endpoint(a, 13);
    let sp_rx = endpoint(b, 23);
    connect(b, Scl, sp_tx, sp_rx);
    let (sp_hs, _) = a.sclchan_send_open_i(sp_tx).unwrap();

    // Opens made before any connect (pending), one per open function.
    let early = |n: &Node, k: Kind, dir: Dir, port: u32| {
        let e = endpoint(n, port);
        (e, open_i(n, k, dir, e).unwrap().0)
    };
    let (eo_prx, eo_prx_h) = early(b, Pkt, Rx, 24);
    let (eo_ptx, eo_ptx_h) = early(a, Pkt, Tx, 19);
    let (eo_srx, eo_srx_h) = early(b, Scl, Rx, 46);
    let (eo_stx, eo_stx_h) = early(a, Scl, Tx, 37);

    // Close pending: the sender (PCS, SCS) or the receiver (PCR, SCR) closed, the other
    // side not yet.
    let (pcs_tx, pcs_rx) = (endpoint(a, 14), endpoint(b, 25));
    let pcs: Chan = channel(a, Pkt, a, pcs_tx, b, pcs_rx);
    a.pktchan_send_close_i(pcs.0).unwrap();
    let (pcr_tx, pcr_rx) = (endpoint(a, 38), endpoint(b, 48));
    let pcr: Chan = channel(a, Pkt, a, pcr_tx, b, pcr_rx);
    b.pktchan_recv_close_i(pcr.1).unwrap();
    let (scs_tx, scs_rx) = (endpoint(a, 15), endpoint(b, 26));
    let scs: Chan = channel(a, Scl, a, scs_tx, b, scs_rx);
    a.sclchan_send_close_i(scs.0).unwrap();
    let (scr_tx, scr_rx) = (endpoint(a, 39), endpoint(b, 49));
    let scr: Chan = channel(a, Scl, a, scr_tx, b, scr_rx);
    b.sclchan_recv_close_i(scr.1).unwrap();

    // X, Y: channels opened and disconnected again: their handles are stale.
    let x: Chan = channel(a, Pkt, a, endpoint(a, 17), b, endpoint(b, 28));
    disconnect(Pkt, a, x.0, b, x.1);
    let y: Chan = channel(a, Scl, a, endpoint(a, 18), b, endpoint(b, 29));
    disconnect(Scl, a, y.0, b, y.1);

    // Receivers incompatible with free_tx (max payload 64 KiB, priority 0).
    let small_rx = endpoint(b, 41);
    b.endpoint_set_attribute(small_rx, Attr::MaxPayloadSize as u32, 1024)
        .unwrap();
    let prio_rx = endpoint(b, 42);
    b.endpoint_set_attribute(prio_rx, Attr::Priority as u32, 3)
        .unwrap();

    // Message endpoints another node sends to (a get reference count above 0).
    let used_rx = endpoint(b, 43);
    let used_tx = endpoint(a, 31);
    let to = a.endpoint_get(0, base + 1, 43, WAIT).unwrap();
    a.msg_send(endpoint(a, 32), to, b"x", 0).unwrap();
    let to = b.endpoint_get(0, base, 31, WAIT).unwrap();
    b.msg_send(endpoint(b, 47), to, b"x", 0).unwrap();
    until("messages queued", || {
        b.msg_available(used_rx) == Ok(1) && a.msg_available(used_tx) == Ok(1)
    });
    let queued_msgs = move || {
        format!(
            "{:?} {:?}",
            b.msg_available(used_rx),
            a.msg_available(used_tx)
        )
    };

    // M: B never receives; A's blocking sends give up after 100 ms.
    let m_tx = a.endpoint_create(35).unwrap();
    a.endpoint_set_attribute(m_tx, TIMEOUT, 100).unwrap();
    let m_rx = endpoint(b, 45);
    let m: Chan = channel(a, Pkt, a, m_tx, b, m_rx);
    let m_next = Cell::new(0u32);
    let m_next = &m_next;

    // ST: a scalar channel A -> B, empty, whose receiver gives up after 100 ms. SF: one
    // whose sender gives up after 100 ms, its FIFO full: the receiver never takes the
    // BUFFERS scalars sent (one credit each). The timeout in force at the open applies.
    let st_rx = b.endpoint_create(50).unwrap();
    b.endpoint_set_attribute(st_rx, TIMEOUT, 100).unwrap();
    let st: Chan = channel(a, Scl, a, endpoint(a, 36), b, st_rx);
    let sf_tx = a.endpoint_create(84).unwrap();
    a.endpoint_set_attribute(sf_tx, TIMEOUT, 100).unwrap();
    let sf: Chan = channel(a, Scl, a, sf_tx, b, endpoint(b, 63));
    for i in 0..BUFFERS as u64 {
        a.sclchan_send(sf.0, i, 8).unwrap();
    }
    until("the scalar FIFO full", || {
        b.sclchan_available(sf.1) == Ok(BUFFERS)
    });

    // T: one open side of each kind and direction, an unconnected endpoint, and a receive
    // that fills its one-slot request table.
    let (t_ps, t_pr, t_ss, t_sr) = (
        endpoint(t, 52),
        endpoint(t, 53),
        endpoint(t, 54),
        endpoint(t, 55),
    );
    let (t_ps_h, tb_ps_h) = channel(a, Pkt, t, t_ps, b, endpoint(b, 61));
    let t_pr_h = channel(a, Pkt, a, endpoint(a, 33), t, t_pr).1;
    let t_ss_h = channel(a, Scl, t, t_ss, b, endpoint(b, 62)).0;
    let t_sr_h = channel(a, Scl, a, endpoint(a, 34), t, t_sr).1;
    let t_fresh = endpoint(t, 51);
    let t_held = t.msg_recv_i(endpoint(t, 56)).unwrap();

    // D: open channels with A in each direction and kind, one packet held; then finalized.
    let (d_ptx, d_prx, d_stx, d_srx) = (
        endpoint(d, 70),
        endpoint(d, 71),
        endpoint(d, 72),
        endpoint(d, 73),
    );
    let (d_ptx_h, a_dprx_h) = channel(a, Pkt, d, d_ptx, a, endpoint(a, 80));
    let (a_dptx_h, d_prx_h) = channel(a, Pkt, a, endpoint(a, 81), d, d_prx);
    let (d_stx_h, a_dsrx_h) = channel(a, Scl, d, d_stx, a, endpoint(a, 82));
    let (a_dstx_h, d_srx_h) = channel(a, Scl, a, endpoint(a, 83), d, d_srx);
    a.pktchan_send(a_dptx_h, b"kept").unwrap();
    let d_held = recv_packet(d, d_prx_h).unwrap().addr();
    d.finalize().unwrap();
    let d_own = |k: Kind, dir: Dir| match (k, dir) {
        (Pkt, Tx) => (d_ptx, d_ptx_h),
        (Pkt, Rx) => (d_prx, d_prx_h),
        (Scl, Tx) => (d_stx, d_stx_h),
        (Scl, Rx) => (d_srx, d_srx_h),
    };

    // F: 256 opens pending, every side slot of the node reserved; one endpoint spare.
    for port in 0..256 {
        let e = f.endpoint_create(100 + port).unwrap();
        f.pktchan_recv_open_i(e).unwrap();
    }
    let f_spare = f.endpoint_create(999).unwrap();

    let big = vec![0u8; mcapi::MAX_PKT_SIZE + 1];
    let big = &big;
    let max = vec![0u8; 64 * 1024 + 1];
    let max = &max;
    let mut rows = Table::default();

    for k in [Pkt, Scl] {
        // 4.4.1 / 4.5.1 connect.
        let cn = k.name("connect_i");
        let (cs, cr) = match k {
            Pkt => (pcs_tx, pcr_rx),
            Scl => (scs_tx, scr_rx),
        };
        let cases: Vec<(Status, String, &Node, EndpointId, EndpointId)> = vec![
            (
                Status::MCAPI_ERR_NODE_NOTINIT,
                "the connecting node has finalized".into(),
                d,
                free_tx,
                free_rx,
            ),
            (
                Status::MCAPI_ERR_ENDP_INVALID,
                "both endpoints the same".into(),
                a,
                free_tx,
                free_tx,
            ),
            (
                Status::MCAPI_ERR_ENDP_INVALID,
                "the receive endpoint does not exist on its node".into(),
                a,
                free_tx,
                ghost_b,
            ),
            (
                Status::MCAPI_ERR_ENDP_INVALID,
                "the send endpoint does not exist on the connecting node".into(),
                a,
                ghost_a,
                free_rx,
            ),
            (
                Status::MCAPI_ERR_ENDP_INVALID,
                "the receive endpoint's node has finalized".into(),
                a,
                free_tx,
                d_srx,
            ),
            (
                Status::MCAPI_ERR_CHAN_CONNECTED,
                "the send endpoint is in an open packet channel".into(),
                a,
                p_tx,
                free_rx,
            ),
            (
                Status::MCAPI_ERR_CHAN_CONNECTED,
                "the receive endpoint is in an open scalar channel".into(),
                a,
                free_tx,
                s_rx,
            ),
            (
                Status::MCAPI_ERR_CHAN_CONNECTED,
                "both endpoints already connected to each other (third node)".into(),
                b,
                p_tx,
                p_rx,
            ),
            (
                Status::MCAPI_ERR_CHAN_CONNECTED,
                "the send endpoint is connected, its channel not opened yet".into(),
                b,
                pp_tx,
                free_rx,
            ),
            (
                Status::MCAPI_ERR_CHAN_CLOSEPENDING,
                "the send endpoint closed its side, the receiver has not".into(),
                a,
                cs,
                free_rx,
            ),
            (
                Status::MCAPI_ERR_CHAN_CLOSEPENDING,
                "the receive endpoint closed its side, the sender has not".into(),
                a,
                free_tx,
                cr,
            ),
            (
                Status::MCAPI_ERR_REQUEST_LIMIT,
                "the connecting node's request table is full".into(),
                t,
                free_tx,
                free_rx,
            ),
            (
                Status::MCAPI_ERR_ENDP_GET_LIMIT,
                "another node has a message queued in the receive endpoint".into(),
                a,
                free_tx,
                used_rx,
            ),
            (
                Status::MCAPI_ERR_ENDP_GET_LIMIT,
                "another node has a message queued in the send endpoint".into(),
                b,
                used_tx,
                free_rx,
            ),
            (
                Status::MCAPI_ERR_ATTR_INCOMPATIBLE,
                "the sender's max payload (64 KiB) is above the receiver's (1 KiB)".into(),
                a,
                free_tx,
                small_rx,
            ),
            (
                Status::MCAPI_ERR_ATTR_INCOMPATIBLE,
                "the priorities differ (0 and 3)".into(),
                a,
                free_tx,
                prio_rx,
            ),
        ];
        for (want, situation, by, s, r) in cases {
            if k == Scl && r == small_rx {
                // Scalars are 8 bytes whatever the packet payloads: checked below.
                continue;
            }
            let owner = |e: EndpointId| if e.node() == base { a } else { b };
            let watched: Vec<(&Node, EndpointId)> = [s, r]
                .into_iter()
                .filter(|e| *e != ghost_a && *e != ghost_b && *e != d_srx)
                .map(|e| (owner(e), e))
                .collect();
            let probe = flags(&watched);
            rows.row(&cn, want, situation, move || {
                connect_i(by, k, s, r).map(drop)
            })
            .keep(move || probe() + &queued_msgs());
        }

        // 4.4.2, 4.4.3 / 4.5.2, 4.5.3 opens.
        for dir in [Rx, Tx] {
            let on = k.name(&format!("{}_open_i", dir.name()));
            let mine = if dir == Rx { b } else { a };
            let (wrong_type, wrong_dir, pending, closing, open) = match (k, dir) {
                (Pkt, Rx) => (
                    (b, sp_rx),
                    (a, pp_tx),
                    Some((b, pp_rx)),
                    (b, pcr_rx),
                    (b, p_rx),
                ),
                (Pkt, Tx) => ((a, sp_tx), (b, pp_rx), None, (a, pcs_tx), (a, p_tx)),
                (Scl, Rx) => ((b, pp_rx), (a, sp_tx), None, (b, scr_rx), (b, s_rx)),
                (Scl, Tx) => (
                    (a, pp_tx),
                    (b, sp_rx),
                    Some((a, sp_tx)),
                    (a, scs_tx),
                    (a, s_tx),
                ),
            };
            let early = match (k, dir) {
                (Pkt, Rx) => (b, eo_prx),
                (Pkt, Tx) => (a, eo_ptx),
                (Scl, Rx) => (b, eo_srx),
                (Scl, Tx) => (a, eo_stx),
            };
            let (d_ep, _) = d_own(k, dir);
            let other = if dir == Rx {
                (a, free_tx)
            } else {
                (b, free_rx)
            };
            let mut cases: Vec<(Status, String, (&Node, EndpointId))> = vec![
                (
                    Status::MCAPI_ERR_NODE_NOTINIT,
                    "the node has finalized (its endpoint was open)".into(),
                    (d, d_ep),
                ),
                (
                    Status::MCAPI_ERR_ENDP_INVALID,
                    "no such endpoint on this node".into(),
                    (a, ghost_a),
                ),
                (
                    Status::MCAPI_ERR_ENDP_INVALID,
                    "another node's endpoint".into(),
                    (mine, other.1),
                ),
                (
                    Status::MCAPI_ERR_CHAN_TYPE,
                    format!("the endpoint is connected in a {} channel", k.other()),
                    wrong_type,
                ),
                (
                    Status::MCAPI_ERR_CHAN_DIRECTION,
                    format!(
                        "the endpoint is connected as the {}",
                        if dir == Rx { "sender" } else { "receiver" }
                    ),
                    wrong_dir,
                ),
                (
                    Status::MCAPI_ERR_REQUEST_LIMIT,
                    "the node's request table is full".into(),
                    (t, t_fresh),
                ),
                (
                    Status::MCAPI_ERR_CHAN_OPENPENDING,
                    "an open made before any connect is pending".into(),
                    early,
                ),
                (
                    Status::MCAPI_ERR_CHAN_CLOSEPENDING,
                    "this side closed, the other side has not".into(),
                    closing,
                ),
                (
                    Status::MCAPI_ERR_CHAN_OPEN,
                    "the channel is open".into(),
                    open,
                ),
                (
                    Status::MCAPI_ERR_GENERAL,
                    "every one of the node's 256 channel sides is taken".into(),
                    (f, f_spare),
                ),
            ];
            if let Some(pending) = pending {
                cases.push((
                    Status::MCAPI_ERR_CHAN_OPENPENDING,
                    "connected, opened here, the other side has not opened".into(),
                    pending,
                ));
            }
            for (want, situation, (n, e)) in cases {
                let watched: Vec<(&Node, EndpointId)> = if e == ghost_a || std::ptr::eq(n, d) {
                    vec![]
                } else if e == other.1 {
                    vec![other]
                } else {
                    vec![(n, e)]
                };
                rows.row(&on, want, situation, move || open_i(n, k, dir, e).map(drop))
                    .keep(flags(&watched));
            }
            let port = 90 + (k == Scl) as u32 * 2 + (dir == Tx) as u32;
            rows.row(
                &on,
                Status::MCAPI_ERR_ENDP_DELETED,
                "the endpoint is deleted while the open (made before any connect) is pending",
                move || {
                    let e = b.endpoint_create(port)?;
                    let (_, q) = open_i(b, k, dir, e)?;
                    b.endpoint_delete(e)?;
                    b.wait(q, None, WAIT).map(drop)
                },
            );
        }
    }

    // 4.4.4 pktchan_send_i and 4.4.5 pktchan_send.
    for blocking in [false, true] {
        let send = move |n: &Node, h: ChannelHandle, data: &[u8]| {
            if blocking {
                n.pktchan_send(h, data)
            } else {
                n.pktchan_send_i(h, data).map(drop)
            }
        };
        let sn = if blocking {
            "mcapi_pktchan_send"
        } else {
            "mcapi_pktchan_send_i"
        };
        let cases: Vec<(Status, &str, &Node, ChannelHandle)> = vec![
            (
                Status::MCAPI_ERR_NODE_NOTINIT,
                "the node has finalized (the channel was open)",
                d,
                d_ptx_h,
            ),
            (
                Status::MCAPI_ERR_CHAN_INVALID,
                "a garbage handle",
                a,
                garbage,
            ),
            (Status::MCAPI_ERR_CHAN_INVALID, "a receive handle", b, p.1),
            (
                Status::MCAPI_ERR_CHAN_INVALID,
                "a scalar channel's send handle",
                a,
                s.0,
            ),
            (
                Status::MCAPI_ERR_CHAN_INVALID,
                "the open is pending (made before any connect)",
                a,
                eo_ptx_h,
            ),
            (
                Status::MCAPI_ERR_CHAN_INVALID,
                "this side closed (close pending)",
                a,
                pcs.0,
            ),
            (
                Status::MCAPI_ERR_CHAN_INVALID,
                "the channel was closed on both sides",
                a,
                x.0,
            ),
            (
                Status::MCAPI_ERR_TRANSMISSION,
                "the receiver closed",
                a,
                pcr.0,
            ),
            (
                Status::MCAPI_ERR_TRANSMISSION,
                "the receiver's node finalized",
                a,
                a_dptx_h,
            ),
        ];
        for (want, situation, n, h) in cases {
            rows.row(sn, want, situation, move || send(n, h, b"x"));
        }
        rows.row(
            sn,
            Status::MCAPI_ERR_PKT_SIZE,
            "64 KiB + 1 on a channel of 64 KiB packets",
            move || send(a, p.0, max),
        );
        rows.row(
            sn,
            Status::MCAPI_ERR_PKT_SIZE,
            "MCAPI_MAX_PKT_SIZE + 1",
            move || send(a, p.0, big),
        );
    }
    rows.row(
        "mcapi_pktchan_send_i",
        Status::MCAPI_ERR_REQUEST_LIMIT,
        "the node's request table is full",
        move || t.pktchan_send_i(t_ps_h, b"x").map(drop),
    );
    rows.row(
        "mcapi_pktchan_send_i",
        Status::MCAPI_ERR_MEM_LIMIT,
        "every staging buffer holds a queued packet (the receiver never receives)",
        move || {
            for _ in 0..8 * BUFFERS {
                a.pktchan_send_i(m.0, &m_next.get().to_le_bytes())?;
                m_next.set(m_next.get() + 1);
            }
            Ok(())
        },
    );
    rows.row(
        "mcapi_pktchan_send",
        Status::MCAPI_TIMEOUT,
        "no credit within the sender's 100 ms timeout (the receiver never receives)",
        move || {
            for _ in 0..8 * BUFFERS {
                a.pktchan_send(m.0, &m_next.get().to_le_bytes())?;
                m_next.set(m_next.get() + 1);
            }
            Ok(())
        },
    );

    // 4.4.6 pktchan_recv_i, 4.4.7 pktchan_recv, 4.4.8 pktchan_available.
    for function in ["recv_i", "recv", "available"] {
        let call = move |n: &Node, h: ChannelHandle| -> Result<(), Status> {
            match function {
                "recv_i" => {
                    let q = n.pktchan_recv_i(h)?;
                    n.wait(q, None, WAIT).map(drop)
                }
                "recv" => n.pktchan_recv(h).map(drop),
                _ => n.pktchan_available(h).map(drop),
            }
        };
        let rn = Pkt.name(function);
        let mut cases: Vec<(Status, &str, &Node, ChannelHandle)> = vec![
            (
                Status::MCAPI_ERR_NODE_NOTINIT,
                "the node has finalized (the channel was open)",
                d,
                d_prx_h,
            ),
            (
                Status::MCAPI_ERR_CHAN_INVALID,
                "a garbage handle",
                b,
                garbage,
            ),
            (Status::MCAPI_ERR_CHAN_INVALID, "a send handle", a, p.0),
            (
                Status::MCAPI_ERR_CHAN_INVALID,
                "a scalar channel's receive handle",
                b,
                s.1,
            ),
            (
                Status::MCAPI_ERR_CHAN_INVALID,
                "the open is pending (the sender has not opened)",
                b,
                pp_hr,
            ),
            (
                Status::MCAPI_ERR_CHAN_INVALID,
                "this side closed (close pending)",
                b,
                pcr.1,
            ),
            (
                Status::MCAPI_ERR_CHAN_INVALID,
                "the channel was closed on both sides",
                b,
                x.1,
            ),
        ];
        if function != "available" {
            cases.push((
                Status::MCAPI_ERR_TRANSMISSION,
                "the sender closed and everything it sent was received",
                b,
                pcs.1,
            ));
            cases.push((
                Status::MCAPI_ERR_TRANSMISSION,
                "the sender's node finalized",
                a,
                a_dprx_h,
            ));
        }
        if function == "recv_i" {
            cases.push((
                Status::MCAPI_ERR_REQUEST_LIMIT,
                "the node's request table is full",
                t,
                t_pr_h,
            ));
        }
        if function == "recv" {
            cases.push((
                Status::MCAPI_TIMEOUT,
                "nothing arrives within the receiver's 100 ms timeout",
                b,
                p.1,
            ));
        }
        for (want, situation, n, h) in cases {
            rows.row(&rn, want, situation, move || call(n, h));
        }
    }

    // 4.4.9 pktchan_release, 4.4.10 pktchan_release_test.
    for test in [false, true] {
        let release = move |n: &Node, addr: usize| {
            if test {
                n.pktchan_release_test(addr).map(drop)
            } else {
                // SAFETY: nothing reads these packets afterwards (only their addresses are
                // kept); the C ABI's release by address is what the cases exercise.
                unsafe { mcapi::capi::pktchan_release_at(n, addr) }
            }
        };
        let rn = if test {
            "mcapi_pktchan_release_test"
        } else {
            "mcapi_pktchan_release"
        };
        let mut cases: Vec<(Status, &str, &Node, usize)> = vec![
            (
                Status::MCAPI_ERR_NODE_NOTINIT,
                "the node has finalized (holding the packet)",
                d,
                d_held,
            ),
            (
                Status::MCAPI_ERR_BUF_INVALID,
                "an address outside every receive pool",
                b,
                0x1000,
            ),
            (
                Status::MCAPI_ERR_BUF_INVALID,
                "a packet another node received (outside this node's pools)",
                a,
                held,
            ),
        ];
        if !test {
            cases.push((
                Status::MCAPI_ERR_BUF_INVALID,
                "a packet already released",
                b,
                released,
            ));
            cases.push((
                Status::MCAPI_ERR_BUF_INVALID,
                "inside a receive pool, not the start of a held packet",
                b,
                held + 1,
            ));
        }
        for (want, situation, n, addr) in cases {
            rows.row(rn, want, situation, move || release(n, addr))
                .keep(still_held);
        }
    }

    // 4.5.4-4.5.7 sclchan_send_uintN, 4.5.8-4.5.11 sclchan_recv_uintN.
    for w in [1usize, 2, 4, 8] {
        let sn = format!("mcapi_sclchan_send_uint{}", 8 * w);
        let send_cases: Vec<(Status, &str, &Node, ChannelHandle)> = vec![
            (
                Status::MCAPI_ERR_NODE_NOTINIT,
                "the node has finalized (the channel was open)",
                d,
                d_stx_h,
            ),
            (
                Status::MCAPI_ERR_CHAN_INVALID,
                "a garbage handle",
                a,
                garbage,
            ),
            (Status::MCAPI_ERR_CHAN_INVALID, "a receive handle", b, s.1),
            (
                Status::MCAPI_ERR_CHAN_INVALID,
                "a packet channel's send handle",
                a,
                p.0,
            ),
            (
                Status::MCAPI_ERR_CHAN_INVALID,
                "the open is pending (the receiver has not opened)",
                a,
                sp_hs,
            ),
            (
                Status::MCAPI_ERR_CHAN_INVALID,
                "this side closed (close pending)",
                a,
                scs.0,
            ),
            (
                Status::MCAPI_ERR_CHAN_INVALID,
                "the channel was closed on both sides",
                a,
                y.0,
            ),
            (Status::MCAPI_ERR_GENERAL, "the receiver closed", a, scr.0),
            (
                Status::MCAPI_ERR_GENERAL,
                "the receiver's node finalized",
                a,
                a_dstx_h,
            ),
        ];
        for (want, situation, n, h) in send_cases {
            rows.row(&sn, want, situation, move || n.sclchan_send(h, 1, w));
        }
        // Not in the table (documented): the endpoint timeout of a blocking call.
        rows.row(
            &sn,
            Status::MCAPI_TIMEOUT,
            "the FIFO stays full through the sender's 100 ms timeout",
            move || a.sclchan_send(sf.0, 0x5A, w),
        )
        .keep(move || format!("{:?}", b.sclchan_available(sf.1)));

        let rn = format!("mcapi_sclchan_recv_uint{}", 8 * w);
        let mut recv_cases: Vec<(Status, &str, &Node, ChannelHandle)> = vec![
            (
                Status::MCAPI_ERR_NODE_NOTINIT,
                "the node has finalized (the channel was open)",
                d,
                d_srx_h,
            ),
            (
                Status::MCAPI_ERR_CHAN_INVALID,
                "a garbage handle",
                b,
                garbage,
            ),
            (Status::MCAPI_ERR_CHAN_INVALID, "a send handle", a, s.0),
            (
                Status::MCAPI_ERR_CHAN_INVALID,
                "a packet channel's receive handle",
                b,
                p.1,
            ),
            (
                Status::MCAPI_ERR_CHAN_INVALID,
                "the open is pending (made before any connect)",
                b,
                eo_srx_h,
            ),
            (
                Status::MCAPI_ERR_CHAN_INVALID,
                "this side closed (close pending)",
                b,
                scr.1,
            ),
            (
                Status::MCAPI_ERR_CHAN_INVALID,
                "the channel was closed on both sides",
                b,
                y.1,
            ),
            (
                Status::MCAPI_ERR_GENERAL,
                "the sender closed and everything it sent was received",
                b,
                scs.1,
            ),
            (
                Status::MCAPI_ERR_GENERAL,
                "the sender's node finalized",
                a,
                a_dsrx_h,
            ),
        ];
        let (mismatch, head) = if w == 1 { (s2.1, 64) } else { (s.1, 8) };
        let situation = if head == 64 {
            "the next scalar is 64-bit (it stays queued)"
        } else {
            "the next scalar is 8-bit (it stays queued)"
        };
        recv_cases.push((Status::MCAPI_ERR_GENERAL, situation, b, mismatch));
        for (want, situation, n, h) in recv_cases {
            let r = rows.row(&rn, want, situation, move || n.sclchan_recv(h, w).map(drop));
            if h == mismatch {
                r.keep(move || format!("{:?}", b.sclchan_available(mismatch)));
            }
        }
        rows.row(
            &rn,
            Status::MCAPI_TIMEOUT,
            "nothing arrives within the receiver's 100 ms timeout",
            move || b.sclchan_recv(st.1, w).map(drop),
        )
        .keep(flags(&[(b, st_rx)]));
    }

    // 4.5.12 sclchan_available.
    let avail_cases: Vec<(Status, &str, &Node, ChannelHandle)> = vec![
        (
            Status::MCAPI_ERR_NODE_NOTINIT,
            "the node has finalized (the channel was open)",
            d,
            d_srx_h,
        ),
        (
            Status::MCAPI_ERR_CHAN_INVALID,
            "a garbage handle",
            b,
            garbage,
        ),
        (Status::MCAPI_ERR_CHAN_INVALID, "a send handle", a, s.0),
        (
            Status::MCAPI_ERR_CHAN_INVALID,
            "a packet channel's receive handle",
            b,
            p.1,
        ),
        (
            Status::MCAPI_ERR_CHAN_INVALID,
            "the open is pending (made before any connect)",
            b,
            eo_srx_h,
        ),
        (
            Status::MCAPI_ERR_CHAN_INVALID,
            "this side closed (close pending)",
            b,
            scr.1,
        ),
        (
            Status::MCAPI_ERR_CHAN_INVALID,
            "the channel was closed on both sides",
            b,
            y.1,
        ),
    ];
    for (want, situation, n, h) in avail_cases {
        rows.row("mcapi_sclchan_available", want, situation, move || {
            n.sclchan_available(h).map(drop)
        });
    }
    // 4.4.11, 4.4.12 / 4.5.13, 4.5.14 close (last: the rows on channels with D close them).
    let mut closes_after_finalize = Vec::new();
    for k in [Pkt, Scl] {
        for dir in [Rx, Tx] {
            let cn = k.name(&format!("{}_close_i", dir.name()));
            // The open side of this kind and direction (channel P or S).
            let open_side = |k: Kind, dir: Dir| match (k, dir) {
                (Pkt, Rx) => (b, p_rx, p.1),
                (Pkt, Tx) => (a, p_tx, p.0),
                (Scl, Rx) => (b, s_rx, s.1),
                (Scl, Tx) => (a, s_tx, s.0),
            };
            let (mine, mine_ep, _) = open_side(k, dir);
            let (_, other_kind_ep, other_kind_h) = open_side(k.flip(), dir);
            let (other_dir_n, other_dir_ep, other_dir_h) = open_side(k, dir.flip());
            let (stale, t_ep, t_h, dead_peer) = match (k, dir) {
                (Pkt, Rx) => (x.1, t_pr, t_pr_h, a_dprx_h),
                (Pkt, Tx) => (x.0, t_ps, t_ps_h, a_dptx_h),
                (Scl, Rx) => (y.1, t_sr, t_sr_h, a_dsrx_h),
                (Scl, Tx) => (y.0, t_ss, t_ss_h, a_dstx_h),
            };
            let (early_n, early_ep, early_h) = match (k, dir) {
                (Pkt, Rx) => (b, eo_prx, eo_prx_h),
                (Pkt, Tx) => (a, eo_ptx, eo_ptx_h),
                (Scl, Rx) => (b, eo_srx, eo_srx_h),
                (Scl, Tx) => (a, eo_stx, eo_stx_h),
            };
            let (closed_n, closed_ep, closed_h) = match (k, dir) {
                (Pkt, Rx) => (b, pcr_rx, pcr.1),
                (Pkt, Tx) => (a, pcs_tx, pcs.0),
                (Scl, Rx) => (b, scr_rx, scr.1),
                (Scl, Tx) => (a, scs_tx, scs.0),
            };
            let (_, d_h) = d_own(k, dir);
            type Case<'n> = (
                Status,
                String,
                &'n Node,
                ChannelHandle,
                Option<(&'n Node, EndpointId)>,
            );
            let mut cases: Vec<Case> = vec![
                (
                    Status::MCAPI_ERR_NODE_NOTINIT,
                    "the node has finalized (the channel was open)".into(),
                    d,
                    d_h,
                    None,
                ),
                (
                    Status::MCAPI_ERR_CHAN_INVALID,
                    "a garbage handle".into(),
                    mine,
                    garbage,
                    None,
                ),
                (
                    Status::MCAPI_ERR_CHAN_INVALID,
                    "the channel was closed on both sides".into(),
                    mine,
                    stale,
                    None,
                ),
                (
                    Status::MCAPI_ERR_CHAN_TYPE,
                    format!("a {} channel's handle", k.other()),
                    mine,
                    other_kind_h,
                    Some((mine, other_kind_ep)),
                ),
                (
                    Status::MCAPI_ERR_CHAN_DIRECTION,
                    format!("the {} handle of an open channel", dir.flip().role()),
                    other_dir_n,
                    other_dir_h,
                    Some((other_dir_n, other_dir_ep)),
                ),
                (
                    Status::MCAPI_ERR_REQUEST_LIMIT,
                    "the node's request table is full".into(),
                    t,
                    t_h,
                    Some((t, t_ep)),
                ),
                (
                    Status::MCAPI_ERR_CHAN_NOTOPEN,
                    "the open is pending (made before any connect)".into(),
                    early_n,
                    early_h,
                    Some((early_n, early_ep)),
                ),
                (
                    Status::MCAPI_ERR_CHAN_NOTOPEN,
                    "this side already closed (close pending)".into(),
                    closed_n,
                    closed_h,
                    Some((closed_n, closed_ep)),
                ),
            ];
            match (k, dir) {
                (Pkt, Rx) => cases.push((
                    Status::MCAPI_ERR_CHAN_NOTOPEN,
                    "the open is pending (connected, the sender has not opened)".into(),
                    b,
                    pp_hr,
                    Some((b, pp_rx)),
                )),
                (Scl, Tx) => cases.push((
                    Status::MCAPI_ERR_CHAN_NOTOPEN,
                    "the open is pending (connected, the receiver has not opened)".into(),
                    a,
                    sp_hs,
                    Some((a, sp_tx)),
                )),
                _ => {}
            }
            for (want, situation, n, h, watched) in cases {
                let watched: Vec<_> = watched.into_iter().chain([(mine, mine_ep)]).collect();
                rows.row(&cn, want, situation, move || {
                    close_i(n, k, dir, h).map(drop)
                })
                .keep(flags(&watched));
            }
            closes_after_finalize.push((cn, k, dir, dead_peer));
        }
    }

    let count = rows.0.len();
    let mut wrong = rows.run();
    drop(rows);

    // Refused sends sent nothing: each channel carries exactly what was accepted, then the
    // sender closes and the receiver learns that nothing more comes.
    let mut check = |what: &str, ok: bool, detail: String| {
        if !ok {
            wrong.push(format!("after the rows, {what}: {detail}"));
        }
    };
    // A finalize closes the node's sides as a close would (a death is MCAPI_ERR_GENERAL:
    // channel_processes.rs): the survivor's close completes.
    for (cn, k, dir, h) in closes_after_finalize {
        let r = close_i(a, k, dir, h).and_then(|q| a.wait(q, None, WAIT));
        check(
            &format!("{cn} after the other side's node finalized"),
            r.is_ok(),
            format!("{r:?}"),
        );
    }
    // P: the two packets of the setup only (the refused oversized ones never went).
    a.pktchan_send_close_i(p.0).unwrap();
    let r = recv_packet(b, p.1).map(|pkt| pkt.to_vec());
    check(
        "P carries only the setup packets",
        r == Err(Status::MCAPI_ERR_TRANSMISSION),
        format!("{r:?}"),
    );
    // M: the packets accepted by the MEM_LIMIT and TIMEOUT rows, in order, nothing else.
    for i in 0..m_next.get() {
        let r = recv_packet(b, m.1);
        let got = r.as_ref().map(|pkt| pkt.to_vec());
        check(
            "M carries each accepted packet",
            got.as_deref() == Ok(&i.to_le_bytes()[..]),
            format!("packet {i}: {got:?}"),
        );
        match r {
            Ok(pkt) => b.pktchan_release(pkt).unwrap(),
            Err(_) => break,
        }
    }
    let q = a.pktchan_send_close_i(m.0).unwrap();
    let r = recv_packet(b, m.1).map(|pkt| pkt.to_vec());
    check(
        "M carries nothing refused",
        r == Err(Status::MCAPI_ERR_TRANSMISSION),
        format!("{r:?}"),
    );
    let qr = b.pktchan_recv_close_i(m.1).unwrap();
    b.wait(qr, None, WAIT).unwrap();
    a.wait(q, None, WAIT).unwrap();
    // S, S2: the scalar each mismatched receive refused is still first.
    let r = b.sclchan_recv(s.1, 1);
    check("S kept its 8-bit scalar", r == Ok(0xAB), format!("{r:?}"));
    let r = b.sclchan_recv(s2.1, 8);
    check(
        "S2 kept its 64-bit scalar",
        r == Ok(u64::MAX - 1),
        format!("{r:?}"),
    );
    for (h, hr) in [(s.0, s.1), (s2.0, s2.1)] {
        a.sclchan_send_close_i(h).unwrap();
        let r = b.sclchan_recv(hr, 8);
        check(
            "a scalar channel carries nothing refused",
            r == Err(Status::MCAPI_ERR_GENERAL),
            format!("{r:?}"),
        );
    }
    // ST: still usable after its timed-out receives, in order.
    for v in [0x11, 0x22] {
        a.sclchan_send(st.0, v, 8).unwrap();
    }
    let r = [b.sclchan_recv(st.1, 8), b.sclchan_recv(st.1, 8)];
    check(
        "ST after its receives timed out",
        r == [Ok(0x11), Ok(0x22)],
        format!("{r:?}"),
    );
    // SF: the BUFFERS scalars of the setup, then the next one sent: no timed-out send
    // went out, and the channel is usable.
    for i in 0..BUFFERS as u64 {
        let r = b.sclchan_recv(sf.1, 8);
        check(
            "SF carries its setup scalars",
            r == Ok(i),
            format!("scalar {i}: {r:?}"),
        );
    }
    let r = a
        .sclchan_send(sf.0, 0x77, 8)
        .and_then(|()| b.sclchan_recv(sf.1, 8));
    check(
        "SF carries nothing that timed out",
        r == Ok(0x77),
        format!("{r:?}"),
    );
    a.sclchan_send_close_i(sf.0).unwrap();
    let r = b.sclchan_recv(sf.1, 8);
    check(
        "SF carries nothing after the close",
        r == Err(Status::MCAPI_ERR_GENERAL),
        format!("{r:?}"),
    );
    // T: the send refused for the full request table did not go.
    t.cancel(t_held).unwrap();
    assert_eq!(
        t.wait(t_held, None, WAIT),
        Err(Status::MCAPI_ERR_REQUEST_CANCELLED)
    );
    t.pktchan_send_close_i(t_ps_h).unwrap();
    let r = recv_packet(b, tb_ps_h).map(|pkt| pkt.to_vec());
    check(
        "T's packet channel carries nothing refused",
        r == Err(Status::MCAPI_ERR_TRANSMISSION),
        format!("{r:?}"),
    );
    // Finalize after finalize: still a value, still NOTINIT.
    let r = d.finalize();
    check(
        "finalize of a finalized node",
        r == Err(Status::MCAPI_ERR_NODE_NOTINIT),
        format!("{r:?}"),
    );

    for n in [a, b, t, f] {
        n.finalize().unwrap();
    }
    eprintln!("{prov}: {count} rows run");
    assert!(
        wrong.is_empty(),
        "{prov}: {} of {count} rows wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// A close whose request is cancelled goes on: it was announced to the other side, which
/// completes its own close against it, and the endpoint must not stay "close pending".
#[test]
fn a_cancelled_close_still_disconnects_the_channel() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    for prov in ["shm", "tcp", "sockets"].into_iter().filter(|p| offered(p)) {
        let a = Node::initialize(3, 1, config(prov)).unwrap();
        let b = Node::initialize(3, 2, config(prov)).unwrap();
        for k in [Pkt, Scl] {
            let s = endpoint(&a, 1);
            let r = endpoint(&b, 1);
            let (hs, hr) = channel(&a, k, &a, s, &b, r);
            let qs = close_i(&a, k, Tx, hs).unwrap();
            assert_eq!(
                a.test(qs, None),
                Ok(None),
                "{prov} {k:?}: the receiver is open"
            );
            a.cancel(qs).unwrap();
            let qr = close_i(&b, k, Rx, hr).unwrap();
            b.wait(qr, None, WAIT).unwrap();
            // The sender's side finishes its close without its request.
            until("the cancelled close to finish", || {
                a.endpoint_delete(s).is_ok()
            });
            b.endpoint_delete(r).unwrap();
        }
        a.finalize().unwrap();
        b.finalize().unwrap();
    }
}

/// A scalar channel carries 8 bytes at most: the endpoints' packet payloads do not matter.
#[test]
fn scalar_channels_connect_whatever_the_packet_payloads() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    let a = Node::initialize(3, 3, config("shm")).unwrap();
    let b = Node::initialize(3, 4, config("shm")).unwrap();
    let s = endpoint(&a, 1);
    let r = endpoint(&b, 1);
    b.endpoint_set_attribute(r, Attr::MaxPayloadSize as u32, 4)
        .unwrap();
    let (hs, hr) = channel(&a, Scl, &a, s, &b, r);
    a.sclchan_send(hs, u64::MAX - 1, 8).unwrap();
    assert_eq!(b.sclchan_recv(hr, 8), Ok(u64::MAX - 1));
    disconnect(Scl, &a, hs, &b, hr);
    a.finalize().unwrap();
    b.finalize().unwrap();
}

/// A channel request whose completion `test` reported is released by `mcapi_cancel`
/// (spec 4.6.1: wait, wait_any or cancel release a request), as a message request is.
#[test]
fn cancel_releases_a_reported_channel_request() {
    let _turn = FABRIC.lock().unwrap_or_else(|p| p.into_inner());
    let a = Node::initialize(3, 5, config("shm")).unwrap();
    let b = Node::initialize(3, 6, config("shm")).unwrap();
    let s = endpoint(&a, 1);
    let r = endpoint(&b, 1);
    let (hs, hr) = channel(&a, Pkt, &a, s, &b, r);
    let reported = |n: &Node, q: RequestHandle| {
        until("the request to complete", || {
            n.test(q, None).unwrap().is_some()
        })
    };
    let sent = a.pktchan_send_i(hs, b"abc").unwrap();
    reported(&a, sent);
    assert_eq!(a.cancel(sent), Ok(()), "a reported send");
    assert_eq!(a.test(sent, None), Err(Status::MCAPI_ERR_REQUEST_INVALID));
    let received = b.pktchan_recv_i(hr).unwrap();
    reported(&b, received);
    let packet = b.received_packet(received).expect("the packet");
    assert_eq!(packet.to_vec(), b"abc");
    b.pktchan_release(packet).unwrap();
    assert_eq!(b.cancel(received), Ok(()), "a reported receive");
    assert_eq!(
        b.test(received, None),
        Err(Status::MCAPI_ERR_REQUEST_INVALID)
    );
    disconnect(Pkt, &a, hs, &b, hr);
    a.finalize().unwrap();
    b.finalize().unwrap();
}
