//! Spec 4.6: `mcapi_test`, `mcapi_wait`, `mcapi_wait_any`, `mcapi_cancel`, and where the
//! receive requests of C put what they receive.
//!
//! A message receive request holds the buffer `mcapi_msg_recv_i` gave it
//! ([`Node::msg_recv_i_into`]); a `pktchan_recv_i` request's packet address comes from
//! [`Node::received_packet`] once it completed, and C gives the `void**` for it to the `_i`
//! call, so this module remembers that per request and hands it to whichever call completes
//! the request. A `wait`/`wait_any` checks a receive request out while it blocks (a
//! concurrent `test` then reports it pending, a second waiter gets
//! `MCAPI_ERR_WAIT_PENDING`), and a `test` while it looks (a wait starting meanwhile waits
//! for it to finish), so no two calls complete it at once.

use super::{
    boolean, current_node, mcapi_boolean_t, mcapi_request_t, mcapi_status_t, mcapi_timeout_t,
    mcapi_uint_t, put, required, timeout, StatusOut, MCAPI_RETURN_VALUE_INVALID, MCA_FALSE,
};
use crate::config::Compat;
use crate::semantics::request::MAX_REQUESTS;
use crate::semantics::Status;
use crate::{Node, RequestHandle};
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::{Mutex, MutexGuard};

/// Where a C receive request puts what it receives.
#[derive(Clone, Copy)]
enum Target {
    /// `mcapi_msg_recv_i`: the message goes into the buffer the request holds.
    Message,
    /// `mcapi_pktchan_recv_i`: the packet's address is written to this `void**`.
    Packet { out: usize },
}

impl Target {
    /// After the request completed successfully: a packet target gets the address of the
    /// packet (the message of a message target is in its buffer already).
    ///
    /// # Safety
    /// A packet target's `void**` is still writable (the `mcapi_pktchan_recv_i` contract).
    unsafe fn deliver(self, node: &Node, request: RequestHandle) -> Result<(), Status> {
        if let Target::Packet { out } = self {
            let address = node
                .received_packet(request)
                .ok_or(Status::MCAPI_ERR_GENERAL)?
                .addr();
            // SAFETY: non-NULL (`mcapi_pktchan_recv_i` requires it) and writable by the
            // contract above; unaligned writes accept any pointer C computed.
            unsafe { (out as *mut *mut c_void).write_unaligned(address as *mut c_void) };
        }
        Ok(())
    }
}

/// Which call has a target checked out.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Holder {
    /// A `test`: briefly (it never blocks); a wait waits for it to check in.
    Test,
    /// A `wait` or `wait_any`: a second wait gets `MCAPI_ERR_WAIT_PENDING`.
    Wait,
}

/// A receive request's target, as C gave it.
struct Pending {
    target: Target,
    /// The call that has it checked out, if any.
    checked_out: Option<Holder>,
    /// A wait waits for a test to check it in: the next tests leave it to the wait (a
    /// thread testing in a loop would otherwise keep it from the wait for good).
    wait_wants: bool,
    /// Cancelled while checked out: forgotten when checked in, whatever the holder saw
    /// (a wait that timed out just before the cancel would keep it otherwise).
    cancelled: bool,
}

/// Requests are per node, so a key is `(domain, node, request)`.
type Key = (u32, u32, u64);

fn key(node: &Node, request: RequestHandle) -> Key {
    (node.domain_id(), node.node_id(), request.as_raw())
}

/// Targets of receive requests not yet reported complete.
fn targets() -> MutexGuard<'static, BTreeMap<Key, Pending>> {
    static TARGETS: Mutex<BTreeMap<Key, Pending>> = Mutex::new(BTreeMap::new());
    TARGETS.lock().unwrap_or_else(|p| p.into_inner())
}

fn remember(node: &Node, request: RequestHandle, target: Target) {
    let entry = Pending {
        target,
        checked_out: None,
        wait_wants: false,
        cancelled: false,
    };
    targets().insert(key(node, request), entry);
}

/// Remembers message receive request `request` (for the checkout of its waits).
pub(super) fn remember_message(node: &Node, request: RequestHandle) {
    remember(node, request, Target::Message);
}

/// Remembers where packet receive request `request` writes its packet's address.
pub(super) fn remember_packet_out(node: &Node, request: RequestHandle, out: *mut *mut c_void) {
    remember(node, request, Target::Packet { out: out as usize });
}

/// Forgets the targets of a finalized node's requests.
pub(super) fn forget_node(domain: u32, node: u32) {
    targets().retain(|&(d, n, _), _| (d, n) != (domain, node));
}

/// `Node::test` with the request's target, if it has one.
///
/// # Safety
/// Any target registered for `request` is still writable (the `mcapi_msg_recv_i` and
/// `mcapi_pktchan_recv_i` contracts).
pub(super) unsafe fn test_now(
    node: &Node,
    request: RequestHandle,
) -> Result<Option<usize>, Status> {
    let key = key(node, request);
    let target = {
        let mut table = targets();
        match table.get_mut(&key) {
            None => {
                drop(table);
                return node.test(request, None);
            }
            // A waiter (or another test) is completing it, or a wait is about to: still
            // pending as far as this call can tell.
            Some(entry) if entry.checked_out.is_some() || entry.wait_wants => return Ok(None),
            Some(entry) => {
                entry.checked_out = Some(Holder::Test);
                entry.target
            }
        }
    };
    // Checked out, the target is this call's alone; the registry lock is not held while
    // the node tests (which may copy a large message), so other requests' tests and waits
    // in other threads go on meanwhile. Checked in whatever happens (a panic caught at the
    // C boundary too), so no wait spins for it for good.
    struct CheckIn(Key, bool);
    impl Drop for CheckIn {
        fn drop(&mut self) {
            let finished = self.1;
            check_in(&[self.0], |_| finished);
        }
    }
    let mut checked_out = CheckIn(key, false);
    let result = node.test(request, None);
    checked_out.1 = !matches!(result, Ok(None));
    let delivered = match result {
        // SAFETY: per this function's contract.
        Ok(Some(_)) => unsafe { target.deliver(node, request) },
        _ => Ok(()),
    };
    drop(checked_out);
    delivered?;
    result
}

/// Checks out the targets of `requests` (those that have one) for a wait, once no `test`
/// holds one of them (a test never blocks: it checks in soon).
///
/// # Errors
/// `MCAPI_ERR_WAIT_PENDING` if another wait holds one of them; nothing is checked out then.
fn check_out(keys: &[Key]) -> Result<Vec<Option<Target>>, Status> {
    loop {
        let mut table = targets();
        let held = |by: Holder| {
            keys.iter()
                .any(|k| table.get(k).is_some_and(|b| b.checked_out == Some(by)))
        };
        if held(Holder::Wait) {
            // Not waiting after all: the tests may take them again (another wait spinning
            // for a test sets this again on its next look).
            for k in keys {
                if let Some(b) = table.get_mut(k) {
                    b.wait_wants = false;
                }
            }
            return Err(Status::MCAPI_ERR_WAIT_PENDING);
        }
        if held(Holder::Test) {
            for k in keys {
                if let Some(b) = table.get_mut(k) {
                    b.wait_wants = true;
                }
            }
            drop(table);
            std::thread::yield_now();
            continue;
        }
        return Ok(keys
            .iter()
            .map(|k| {
                table.get_mut(k).map(|b| {
                    (b.checked_out, b.wait_wants) = (Some(Holder::Wait), false);
                    b.target
                })
            })
            .collect());
    }
}

/// Gives checked-out targets back: `finished` ones are forgotten, the others can be used
/// by the next test or wait.
fn check_in(keys: &[Key], finished: impl Fn(usize) -> bool) {
    let mut table = targets();
    for (i, k) in keys.iter().enumerate() {
        if finished(i) || table.get(k).is_some_and(|b| b.cancelled) {
            table.remove(k);
        } else if let Some(b) = table.get_mut(k) {
            b.checked_out = None;
        }
    }
}

/// Whether a wait's error leaves the request pending (so its target stays registered).
fn still_pending(error: Status) -> bool {
    matches!(
        error,
        Status::MCAPI_TIMEOUT | Status::MCAPI_ERR_WAIT_PENDING
    )
}

/// `mcapi_test` (4.6.1): `MCA_TRUE` and `*size` once the request completed (a message
/// receive's message is then in its buffer, a packet receive's packet address in its
/// `void*`); `MCA_FALSE` with `MCAPI_PENDING` before. The request stays valid until waited
/// on or cancelled. On error `MCA_FALSE` (4.6.1's RETURN VALUE), but `MCA_TRUE` when the
/// node follows `MCAPI_COMPAT=mca`: there only a request still pending says `MCA_FALSE`, so
/// `while (!mcapi_test(...))` ends on a failed request, an invalid one or a NULL `size`.
///
/// # Safety
/// `request` is NULL or readable; `size` and `status` are NULL or writable; a receive
/// request's buffer (or packet pointer) is still writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_test(
    request: *mut mcapi_request_t,
    size: *mut usize,
    status: *mut mcapi_status_t,
) -> mcapi_boolean_t {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    status.call_reporting(MCA_FALSE, || {
        // SAFETY: NULL or readable by the contract.
        let handle = request_arg(size, unsafe { request.as_ref() });
        let node = with_node(&handle)?;
        // SAFETY: receive targets per this function's contract.
        match handle.and_then(|h| unsafe { test_now(&node, h) }) {
            Ok(Some(n)) => {
                // SAFETY: non-NULL (checked by `request_arg`) and writable by the contract.
                unsafe { put(size, n) };
                Ok((boolean(true), Status::MCAPI_SUCCESS))
            }
            Ok(None) => Ok((boolean(false), Status::MCAPI_PENDING)),
            Err(e) => Ok((boolean(mca(&node)), e)),
        }
    })
}

/// The request of `mcapi_test`/`mcapi_wait`, or `MCAPI_ERR_PARAMETER` for a NULL `size` or
/// `request`.
fn request_arg(size: *mut usize, request: Option<&u64>) -> Result<RequestHandle, Status> {
    required(size)?;
    request
        .map(|&raw| RequestHandle::from_raw(raw))
        .ok_or(Status::MCAPI_ERR_PARAMETER)
}

/// The calling thread's node; without one, a parameter error found already is reported
/// before `MCAPI_ERR_NODE_NOTINIT`.
fn with_node<T>(checked: &Result<T, Status>) -> Result<Node, Status> {
    current_node().map_err(|e| checked.as_ref().err().copied().unwrap_or(e))
}

/// Whether `node` follows the MCA reference implementation's readings (`MCAPI_COMPAT=mca`).
fn mca(node: &Node) -> bool {
    node.compat() == Compat::Mca
}

/// `mcapi_wait` (4.6.2): blocks until the request completes (it is released then), is
/// cancelled, or `timeout` milliseconds pass (`MCAPI_TIMEOUT`; the request stays valid).
/// `MCA_TRUE` on success, `MCA_FALSE` on error (4.6.2's RETURN VALUE); under
/// `MCAPI_COMPAT=mca` also `MCA_TRUE` for a request that finished with an error (cancelled
/// included) and for a NULL `size` or `request`, as the reference implementation returns.
///
/// # Safety
/// `request` is NULL or readable; `size` and `status` are NULL or writable; a receive
/// request's buffer (or packet pointer) is still writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_wait(
    request: *mut mcapi_request_t,
    size: *mut usize,
    timeout_ms: mcapi_timeout_t,
    status: *mut mcapi_status_t,
) -> mcapi_boolean_t {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    status.call_reporting(MCA_FALSE, || {
        // SAFETY: NULL or readable by the contract.
        let handle = request_arg(size, unsafe { request.as_ref() });
        let node = with_node(&handle)?;
        let handle = match handle {
            Ok(h) => h,
            Err(e) => return Ok((boolean(mca(&node)), e)),
        };
        let keys = [key(&node, handle)];
        let target = check_out(&keys)?.pop().flatten();
        let result = node.wait_outcome(handle, None, timeout(timeout_ms));
        check_in(&keys, |_| !matches!(result, Err(e) if still_pending(e)));
        let n = match result? {
            Ok(n) => n,
            // The request finished with an error and is released.
            Err(e) => return Ok((boolean(mca(&node)), e)),
        };
        if let Some(target) = target {
            // SAFETY: checked out until now and completed here; writable by the contract.
            unsafe { target.deliver(&node, handle)? };
        }
        // SAFETY: non-NULL and writable by the contract.
        unsafe { put(size, n) };
        Ok((boolean(true), Status::MCAPI_SUCCESS))
    })
}

/// `mcapi_wait_any` (4.6.3): `requests` is an array of `number` pointers to requests (as
/// the MCA headers declare it, not the synopsis' `mcapi_request_t*`). Returns the index of
/// the request that finished (released now), successfully (its size written) or with an
/// error of its own (the status), or `MCAPI_RETURN_VALUE_INVALID` with the error of the
/// call itself, a timeout, or `MCAPI_ERR_REQUEST_CANCELLED` for a request cancelled during
/// the wait. Under `MCAPI_COMPAT=mca` a cancelled request is named by its index too, as the
/// reference implementation does.
///
/// # Safety
/// `requests` is NULL or aligned and readable for `number` pointers, each NULL or aligned
/// and readable; `size` and
/// `status` are NULL or writable; receive requests' buffers (and packet pointers) are still
/// writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_wait_any(
    number: usize,
    requests: *mut *mut mcapi_request_t,
    size: *mut usize,
    timeout_ms: mcapi_timeout_t,
    status: *mut mcapi_status_t,
) -> mcapi_uint_t {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    status.call_reporting(MCAPI_RETURN_VALUE_INVALID, || {
        required(size)?;
        required(requests)?;
        // No list longer than the request table can name distinct requests (and a huge
        // `number` would make from_raw_parts' size bound fail on a 32-bit target).
        if number == 0 || number > MAX_REQUESTS {
            return Err(Status::MCAPI_ERR_PARAMETER);
        }
        // SAFETY: non-NULL, aligned and readable for `number` pointers by the contract;
        // `number` pointers are at most 2^24 * 8 bytes, under isize::MAX.
        let pointers = unsafe { std::slice::from_raw_parts(requests, number) };
        let handles = pointers
            .iter()
            // SAFETY: each pointer is NULL or readable by the contract.
            .map(|&p| unsafe { p.as_ref() }.map(|&raw| RequestHandle::from_raw(raw)))
            .collect::<Option<Vec<_>>>()
            .ok_or(Status::MCAPI_ERR_PARAMETER)?;
        let node = current_node()?;
        let keys: Vec<Key> = handles.iter().map(|&h| key(&node, h)).collect();
        let checked_out = check_out(&keys)?;
        let result = node.wait_any_into(&handles, &mut [], timeout(timeout_ms));
        let finished = match &result {
            Ok((index, _)) => Some(*index),
            Err(_) => None,
        };
        check_in(&keys, |i| Some(i) == finished);
        let (index, outcome) = result?;
        let n = match outcome {
            Ok(n) => n,
            // 4.6.3: the index names the request that finished, successfully or with an
            // error (it is released either way); only a cancel is reported as
            // MCAPI_RETURN_VALUE_INVALID in spec mode.
            Err(Status::MCAPI_ERR_REQUEST_CANCELLED) if !mca(&node) => {
                return Err(Status::MCAPI_ERR_REQUEST_CANCELLED)
            }
            Err(e) => return Ok((index as mcapi_uint_t, e)),
        };
        if let Some(target) = checked_out[index] {
            // SAFETY: checked out until now and completed here; writable by the contract.
            unsafe { target.deliver(&node, handles[index])? };
        }
        // SAFETY: non-NULL and writable by the contract.
        unsafe { put(size, n) };
        Ok((index as mcapi_uint_t, Status::MCAPI_SUCCESS))
    })
}

/// `mcapi_cancel` (4.6.4): a cancelled receive takes no message and forgets its buffer. A
/// packet receive already served a packet, or a packet send already handed to the fabric,
/// cannot be cancelled (`MCAPI_ERR_REQUEST_INVALID`): it completes as usual.
///
/// # Safety
/// `request` is NULL or readable; `status` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcapi_cancel(request: *mut mcapi_request_t, status: *mut mcapi_status_t) {
    // SAFETY: `status` is NULL or writable per this function's contract.
    let status = unsafe { StatusOut::new(status) };
    status.call((), || {
        // SAFETY: NULL or readable by the contract.
        let handle = RequestHandle::from_raw(
            *unsafe { request.as_ref() }.ok_or(Status::MCAPI_ERR_PARAMETER)?,
        );
        let node = current_node()?;
        node.cancel(handle)?;
        // A waiter holding the target forgets it when it checks it in.
        let key = key(&node, handle);
        let mut table = targets();
        match table.get_mut(&key) {
            Some(b) if b.checked_out.is_some() => b.cancelled = true,
            Some(_) => {
                table.remove(&key);
            }
            None => {}
        }
        drop(table);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    /// A receive cancelled while a wait that just timed out still holds its target is
    /// forgotten when that wait checks it in, not kept until the node finalizes.
    #[test]
    fn a_target_cancelled_while_checked_out_is_forgotten_at_check_in() {
        let mut config = Config::defaults();
        config.provider = Some("shm".into());
        config.job = format!("capi-cancel-{}", std::process::id());
        let node = Node::initialize(0, 40, config).expect("a node");
        let rx = node.endpoint_create(1).expect("an endpoint");
        let request = node.msg_recv_i(rx).expect("a receive");
        remember_message(&node, request);
        let k = key(&node, request);
        // A wait has it checked out and is about to report MCAPI_TIMEOUT...
        assert!(check_out(&[k]).is_ok());
        // ...when another thread cancels it.
        let mut raw = request.as_raw();
        let mut status = Status::MCAPI_SUCCESS.code();
        // SAFETY: both pointers are to locals.
        unsafe { mcapi_cancel(&mut raw, &mut status) };
        assert_eq!(status, Status::MCAPI_SUCCESS.code());
        assert!(targets().contains_key(&k), "forgotten under the waiter");
        check_in(&[k], |_| false);
        assert!(!targets().contains_key(&k), "kept after the cancel");
        node.finalize().expect("finalize");
    }

    /// A wait that starts while a `test` looks at the same receive waits for the test to
    /// finish (it is no other wait: not MCAPI_ERR_WAIT_PENDING); a second wait is refused.
    #[test]
    fn a_wait_during_a_test_waits_for_it_a_second_wait_is_refused() {
        let k = (u32::MAX, u32::MAX, 7);
        let entry = Pending {
            target: Target::Message,
            checked_out: Some(Holder::Test),
            wait_wants: false,
            cancelled: false,
        };
        targets().insert(k, entry);
        let waiter = std::thread::spawn(move || check_out(&[k]).map(|t| t.len()));
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            !waiter.is_finished(),
            "the wait went on while the test held it"
        );
        assert!(
            targets()[&k].wait_wants,
            "the next tests leave it to the wait"
        );
        check_in(&[k], |_| false);
        assert_eq!(waiter.join().unwrap(), Ok(1));
        assert_eq!(
            check_out(&[k]).map(|t| t.len()),
            Err(Status::MCAPI_ERR_WAIT_PENDING)
        );
        targets().remove(&k);
    }

    /// A wait that gives up (another wait holds one of its requests) leaves the tests of the
    /// others free again: no request stays reported pending for good.
    #[test]
    fn a_wait_that_gives_up_lets_tests_go_on() {
        let (a, b) = ((u32::MAX, u32::MAX - 1, 1), (u32::MAX, u32::MAX - 1, 2));
        for (k, holder) in [(a, Some(Holder::Test)), (b, None)] {
            let entry = Pending {
                target: Target::Message,
                checked_out: holder,
                wait_wants: false,
                cancelled: false,
            };
            targets().insert(k, entry);
        }
        let waiter = std::thread::spawn(move || check_out(&[a, b]).map(|t| t.len()));
        std::thread::sleep(std::time::Duration::from_millis(50));
        // Another wait takes `b` meanwhile.
        targets().get_mut(&b).unwrap().checked_out = Some(Holder::Wait);
        assert_eq!(waiter.join().unwrap(), Err(Status::MCAPI_ERR_WAIT_PENDING));
        assert!(
            !targets()[&a].wait_wants,
            "tests of `a` would say pending for good"
        );
        targets().remove(&a);
        targets().remove(&b);
    }
}
