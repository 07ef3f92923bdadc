//! Prints what each libfabric provider on this machine negotiates for RDM + tagged messaging.
//!
//! `cargo run -p mcapi-ofi --example ofi_probe [provider...]`

use mcapi_ofi::{flags, libfabric_version, Hints, Info};

fn main() {
    let (maj, min) = libfabric_version();
    println!("libfabric {maj}.{min}");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let names: Vec<&str> = if args.is_empty() {
        vec!["shm", "tcp", "sockets", "udp", "net", "verbs"]
    } else {
        args.iter().map(String::as_str).collect()
    };
    for name in names {
        let mut hints = Hints::new().provider(name);
        if name != "shm" {
            hints = hints.source(Some("127.0.0.1"), None);
        }
        match Info::first(&hints) {
            Err(e) => println!("{name:8} not available: {e}"),
            Ok(info) => {
                let a = info.attributes();
                println!(
                    "{name:8} provider={} domain={} inject={} max_msg={} cq_data={} tag_format={:#x} \
                     msg_order_sas={} comp_order_strict={} multi_recv={} rma={} directed={} \
                     mr_mode={:#x} data_progress={:?} ctrl_progress={:?} threading={} ep_cnt={} cq_cnt={} tx={} rx={} mode={:#x}",
                    a.provider,
                    a.domain,
                    a.inject_size,
                    a.max_msg_size,
                    a.cq_data_size,
                    a.mem_tag_format,
                    a.send_after_send_ordered(),
                    a.completions_ordered(),
                    Info::offers(&hints, flags::MULTI_RECV),
                    Info::offers(&hints, flags::RMA),
                    Info::offers(&hints, flags::DIRECTED_RECV),
                    a.mr_mode,
                    a.data_progress(),
                    a.control_progress(),
                    a.threading,
                    a.ep_cnt,
                    a.cq_cnt,
                    a.tx_size,
                    a.rx_size,
                    a.mode,
                );
            }
        }
    }
}
