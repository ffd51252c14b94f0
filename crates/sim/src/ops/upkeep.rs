//! The janitor's operation: one budgeted step of upkeep.

use sluice_core::upkeep::Janitor;

use crate::world::{Act, Res, World};

impl World {
    pub(crate) fn start_janitor(&mut self, c: usize, janitor: Janitor) {
        let budget = self.rng.range(10, 400) as usize;
        self.spawn(c, Act::Janitor, None, async move { Res::Janitor(janitor.step(budget).await) });
    }

    pub(crate) fn on_janitor(&mut self) {
        self.stat("janitor_steps");
    }
}
