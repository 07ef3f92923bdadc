//! Channel limits and completion-context tags shared by the channel modules (a leaf: imports nothing of them).

use std::time::Duration;

/// Largest packet an endpoint may be configured for (`MCAPI_MAX_PKT_SIZE`).
pub const MAX_PKT_SIZE: usize = 4 << 20;
/// Channel sides one node can have open at once.
pub(super) const MAX_SIDES: usize = 256;
/// Extra bytes per multi-receive pool buffer of a channel whose packets reach `payload`
/// bytes, so small packets share a buffer (fewer re-posts): 8 KiB, or an eighth of the
/// payload when that is more. A buffer leaves the provider once less than `payload` is
/// free in it, so small packets fill only the slack: with 8 KiB on a 1 MiB channel every
/// third 4 KiB packet re-posted a 1 MiB buffer, and tcp pkt-bw ran at 0.55x of raw
/// (docs/performance.md).
pub(super) fn pool_slack(payload: usize) -> usize {
    (payload / 8).max(8 * 1024)
}
/// A scalar receive slot: one posted receive of the widest scalar.
pub(super) const SCALAR_SLOT: usize = 8;
/// Completion contexts on a sender's CQ (a receiver's contexts are pool buffer or scalar
/// slot indexes).
pub(super) const CTX_CREDIT: u64 = 1 << 40;
pub(super) const CTX_STAGING: u64 = 2 << 40;
pub(super) const CTX_ZERO_COPY: u64 = 3 << 40;
/// A zero-copy `pktchan_send_i` packet; the low bits are its slot in `SendData::in_flight`.
pub(super) const CTX_USER: u64 = 4 << 40;
/// A send side's flush marker (`SendData::flush_marker`).
pub(super) const CTX_FLUSH: u64 = 5 << 40;
pub(super) const CTX_MASK: u64 = (1 << 40) - 1;
/// The remote CQ data of a flush marker: beyond every sequence number (which takes 32 bits),
/// so its receiver tells it from an item even where the provider leaves out the CQ data
/// flag (sockets, whose CQ data has 8 bytes).
pub(super) const FLUSH_MARK: u64 = 1 << 63;
/// How long zero-copy packets in flight when the receiver closed or died may still complete
/// before the sender's endpoint is closed under them (and they fail).
pub(super) const ZERO_COPY_GRACE: Duration = Duration::from_millis(100);
