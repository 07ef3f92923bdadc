//! Finding a side under its lock: by handle, or by the address of a released packet.

use super::handle::ChannelHandle;
use super::table::SideGuard;
use crate::node::common::{lock, Result};
use crate::node::inner::NodeInner;
use crate::semantics::channel::{ChannelKind, Direction};
use crate::semantics::Status;
use std::sync::atomic::Ordering;

impl NodeInner {
    /// Locks side `handle` after checking it is live and of the kind and direction the
    /// caller needs.
    #[inline(always)]
    pub(super) fn side(
        &self,
        handle: ChannelHandle,
        kind: ChannelKind,
        dir: Direction,
    ) -> Result<SideGuard<'_>> {
        // Finalize dropped every side: on a finalized node any handle is refused as
        // MCAPI_ERR_NODE_NOTINIT (looked up only on this error path, never on the data path).
        let invalid = || self.unless_finalized(Status::MCAPI_ERR_CHAN_INVALID);
        let Some((slot, generation, k, d)) = handle.decode() else {
            return Err(invalid());
        };
        if k != kind || d != dir {
            return Err(invalid());
        }
        self.check_working()?;
        let g = self.channels.sides[slot].lock();
        if dir == Direction::Send && self.closing.load(Ordering::Relaxed) {
            // `finalize` began: its flush (which takes this lock after setting the flag)
            // covers only what was sent before.
            return Err(Status::MCAPI_ERR_NODE_NOTINIT);
        }
        if g.as_ref().is_some_and(|s| s.generation == generation) {
            // An application call uses the side: the background thread keeps away (only a
            // change matters, so racing plain stores will do).
            let touched = &self.channels.touched[slot];
            touched.store(
                touched.load(Ordering::Relaxed).wrapping_add(1),
                Ordering::Relaxed,
            );
            return Ok(g);
        }
        drop(g);
        Err(invalid())
    }

    /// Locks the side whose receive pool holds `addr` (see [`NodeInner::pool_slot`]); returns
    /// its slot too.
    pub(super) fn pool_side(&self, addr: usize) -> Result<(usize, SideGuard<'_>)> {
        let slot = self.channels.last_pool.load(Ordering::Relaxed);
        let g = self.channels.sides[slot].lock();
        if g.as_ref().is_some_and(|s| s.pool_contains(addr)) {
            return Ok((slot, g));
        }
        drop(g);
        let slot = self.pool_slot(addr)?;
        self.channels.last_pool.store(slot, Ordering::Relaxed);
        Ok((slot, self.channels.sides[slot].lock()))
    }

    /// The side whose receive pool holds `addr`: `MCAPI_ERR_BUF_INVALID` for any other
    /// address, `MCAPI_ERR_NODE_NOTINIT` once finalized (finalize forgets every pool; looked
    /// up only on this error path, so a release takes no node state lock).
    fn pool_slot(&self, addr: usize) -> Result<usize> {
        let found = lock(&self.channels.pools)
            .iter()
            .find(|p| (p.0..p.1).contains(&addr))
            .map(|p| p.2);
        found.ok_or_else(|| self.unless_finalized(Status::MCAPI_ERR_BUF_INVALID))
    }

    /// `MCAPI_ERR_NODE_NOTINIT` on a finalized node, else `status`: for the error paths of
    /// calls that do not take the node state lock when they succeed.
    pub(super) fn unless_finalized(&self, status: Status) -> Status {
        if lock(&self.state).finalized {
            Status::MCAPI_ERR_NODE_NOTINIT
        } else {
            status
        }
    }
}
