//! A killed process leaves its shm regions (`/dev/shm/<pid>:<n>:<n>`) behind; a later process
//! that gets the same pid must still open shm endpoints (libfabric's shm would refuse to
//! create a region whose name exists: `fi_enable` fails with `-EBUSY`). Its own test binary:
//! the clean-up runs before the process's first shm endpoint.

use mcapi_ofi::WaitObject;
use mcapi_ofi::{AddressVector, CompletionQueue, Domain, Endpoint, EndpointOptions, Hints, Info};
use std::time::{Duration, SystemTime};

#[test]
fn regions_left_by_a_dead_process_with_this_pid_do_not_block_shm() {
    let Ok(info) = Info::first(&Hints::new().provider("shm")) else {
        eprintln!("skipped: no shm provider");
        return;
    };
    let pid = std::process::id();
    let old = SystemTime::now() - Duration::from_secs(24 * 3600);
    // What the dead process would have left: the names this process's endpoints take.
    let stale: Vec<String> = (0..4).map(|i| format!("/dev/shm/{pid}:0:{i}")).collect();
    for path in &stale {
        let f = std::fs::File::create(path).unwrap();
        f.set_len(4096).unwrap();
        f.set_modified(old).unwrap();
    }
    // A region made since this process started (by another libfabric user in it) stays.
    let fresh = format!("/dev/shm/{pid}:77:77");
    std::fs::File::create(&fresh).unwrap();

    let domain = Domain::open_info(&info).unwrap();
    let cq = CompletionQueue::open(&domain, 0, WaitObject::None).unwrap();
    let av = AddressVector::open(&domain, 8).unwrap();
    let ep = Endpoint::open(&domain, &cq, &av, EndpointOptions::default());
    let fresh_kept = std::path::Path::new(&fresh).exists();
    _ = std::fs::remove_file(&fresh);
    let ep = ep.expect("an shm endpoint despite the dead process's regions");
    assert!(fresh_kept, "a region newer than the process was removed");
    drop(ep);
}
