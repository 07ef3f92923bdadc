//! A node that dies (kill -9) or finalizes and then runs again under the same
//! `<domain, node>` is reachable again: the survivor's `endpoint_get` finds the new run,
//! messages flow with fresh credits and sequence numbers, and packet and scalar channels
//! connect and open anew, five runs in a row. Real processes over shm and tcp (the harness
//! in `common`); shm peers are killed between calls (docs/providers.md).

mod common;

use common::{config, Peer};
use libtest_mimic::{Failed, Trial};
use mcapi::{ChannelHandle, EndpointId, Node, Status};
use std::time::{Duration, Instant};

const RUNS: u32 = 5;
const MESSAGES: u32 = 200;
const PACKETS: u32 = 50;
const SCALARS: u32 = 50;
const WAIT: Option<Duration> = Some(Duration::from_secs(20));
const SURVIVOR: u32 = 60;
const RESTARTER: u32 = 61;
/// The restarting node's endpoints: messages, packet receiver, scalar receiver.
const MSG_PORT: u32 = 5;
const PKT_PORT: u32 = 6;
const SCL_PORT: u32 = 7;

fn main() {
    common::run(child, |prov| {
        vec![
            Trial::test(
                format!("{prov}::killed_node_runs_again_five_times"),
                move || survivor(prov, "killed"),
            ),
            Trial::test(
                format!("{prov}::node_finalized_and_initialized_again_in_one_process"),
                move || survivor(prov, "reinit"),
            ),
        ]
    });
}

/// The surviving node: for each run of the other node, finds its endpoints, sends messages,
/// packets and scalars, then lets the run end (killed, or finalized by itself) and closes
/// its own channel sides.
fn survivor(prov: &str, how: &str) -> Result<(), Failed> {
    let job = format!("restart-{how}-{prov}-{}", std::process::id());
    let node = Node::initialize(0, SURVIVOR, config(prov, &job))?;
    let tx = node.endpoint_create(1)?;
    let pkt_tx = node.endpoint_create(2)?;
    let scl_tx = node.endpoint_create(3)?;
    // One process for every run (`reinit`), or one process per run (`killed`).
    let mut peer = (how == "reinit")
        .then(|| Peer::spawn("reinit", prov, &job))
        .transpose()?;
    let mut slowest = Duration::ZERO;
    for run in 0..RUNS {
        if how == "killed" {
            peer = Some(Peer::spawn(&format!("run{run}"), prov, &job)?);
        }
        let p = peer.as_mut().ok_or("no peer")?;
        p.expect("ready")?;
        let start = Instant::now();
        let to = node
            .endpoint_get(0, RESTARTER, MSG_PORT, WAIT)
            .map_err(|e| format!("run {run}: endpoint_get: {e}"))?;
        slowest = slowest.max(start.elapsed());
        for i in 0..MESSAGES {
            node.msg_send(tx, to, &(run * 10_000 + i).to_le_bytes(), i % 4)
                .map_err(|e| format!("run {run}: message {i}: {e}"))?;
        }
        let pkt = open_sender(&node, pkt_tx, PKT_PORT, true)
            .map_err(|e| format!("run {run}: packet channel: {e}"))?;
        for i in 0..PACKETS {
            node.pktchan_send(pkt, &(run * 10_000 + i).to_le_bytes())
                .map_err(|e| format!("run {run}: packet {i}: {e}"))?;
        }
        let scl = open_sender(&node, scl_tx, SCL_PORT, false)
            .map_err(|e| format!("run {run}: scalar channel: {e}"))?;
        for i in 0..SCALARS {
            node.sclchan_send(scl, u64::from(run * 10_000 + i), 8)
                .map_err(|e| format!("run {run}: scalar {i}: {e}"))?;
        }
        p.expect("done")?;
        if how == "killed" {
            peer.take().ok_or("no peer")?.kill()?;
        } else {
            p.expect("finalized")?;
        }
        // The run is gone (or going): the survivor's sides close with the documented
        // statuses (success once the peer finalized, MCAPI_ERR_GENERAL once it is known
        // dead), and its endpoints are unconnected for the next run.
        for (q, what) in [
            (node.pktchan_send_close_i(pkt)?, "packet"),
            (node.sclchan_send_close_i(scl)?, "scalar"),
        ] {
            match node.wait(q, None, WAIT) {
                Ok(_) | Err(Status::MCAPI_ERR_GENERAL) => {}
                Err(e) => return Err(format!("run {run}: {what} close: {e}").into()),
            }
        }
    }
    if let Some(p) = peer {
        p.finish()?;
    }
    node.finalize()?;
    eprintln!("  {prov} {how}: slowest endpoint_get of a new run {slowest:?}");
    Ok(())
}

/// Connects local endpoint `from` to the restarting node's `port` and opens the send side.
fn open_sender(
    node: &Node,
    from: EndpointId,
    port: u32,
    packet: bool,
) -> Result<ChannelHandle, Status> {
    let to = node.endpoint_get(0, RESTARTER, port, WAIT)?;
    let c = if packet {
        node.pktchan_connect_i(from, to)?
    } else {
        node.sclchan_connect_i(from, to)?
    };
    node.wait(c, None, WAIT)?;
    let (h, q) = if packet {
        node.pktchan_send_open_i(from)?
    } else {
        node.sclchan_send_open_i(from)?
    };
    node.wait(q, None, WAIT)?;
    Ok(h)
}

/// One run of the restarting node: receives and checks everything the survivor sends.
fn one_run(prov: &str, job: &str, run: u32) -> Node {
    let n = Node::initialize(0, RESTARTER, config(prov, job)).unwrap();
    let rx = n.endpoint_create(MSG_PORT).unwrap();
    let pkt_rx = n.endpoint_create(PKT_PORT).unwrap();
    let scl_rx = n.endpoint_create(SCL_PORT).unwrap();
    n.set_endpoint_timeout(rx, WAIT).unwrap();
    println!("ready");
    let mut next = [0u32; 4];
    let mut buf = [0u8; 8];
    for _ in 0..MESSAGES {
        let len = n.msg_recv(rx, &mut buf).unwrap();
        let i = u32::from_le_bytes(buf[..len].try_into().unwrap()) - run * 10_000;
        let prio = (i % 4) as usize;
        assert_eq!(i, next[prio] * 4 + prio as u32, "run {run}: order");
        next[prio] += 1;
    }
    let (pkt, q) = n.pktchan_recv_open_i(pkt_rx).unwrap();
    n.wait(q, None, WAIT).unwrap();
    for i in 0..PACKETS {
        let p = n.pktchan_recv(pkt).unwrap();
        let mut b = [0u8; 4];
        p.copy_to(&mut b);
        n.pktchan_release(p).unwrap();
        assert_eq!(u32::from_le_bytes(b), run * 10_000 + i, "run {run}: packet");
    }
    let (scl, q) = n.sclchan_recv_open_i(scl_rx).unwrap();
    n.wait(q, None, WAIT).unwrap();
    for i in 0..SCALARS {
        let v = n.sclchan_recv(scl, 8).unwrap();
        assert_eq!(v, u64::from(run * 10_000 + i), "run {run}: scalar");
    }
    println!("done");
    n
}

fn child(spec: &str) {
    let mut parts = spec.splitn(3, ':');
    let (role, prov, job) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap(),
    );
    if role == "reinit" {
        for run in 0..RUNS {
            let n = one_run(prov, job, run);
            n.finalize().unwrap();
            println!("finalized");
        }
    } else {
        let run: u32 = role["run".len()..].parse().unwrap();
        let _node = one_run(prov, job, run);
        // Killed here, between calls.
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }
}
