//! Under `mpirun -n 2` (or more): each rank prints who it is, publishes a key and looks up
//! the next rank's, which that rank publishes a second later.
use std::time::{Duration, Instant};

fn main() -> Result<(), pmix_sys::Error> {
    let c = pmix_sys::Client::process()?;
    let (me, n) = (c.rank(), c.job_size()?);
    println!(
        "{} rank {me} of {n} ({} here)",
        c.namespace(),
        c.local_size()?
    );
    if me == 1 {
        std::thread::sleep(Duration::from_secs(1));
    }
    c.publish(&format!("probe.{me}"), &format!("value of {me}"))?;
    let other = (me + 1) % n;
    let soon = Some(Instant::now() + Duration::from_secs(5));
    println!(
        "rank {me} found {:?}",
        c.lookup(&format!("probe.{other}"), soon)?
    );
    let never = c.lookup(
        "probe.never",
        Some(Instant::now() + Duration::from_millis(100)),
    )?;
    println!("rank {me} never: {never:?}");
    Ok(())
}
