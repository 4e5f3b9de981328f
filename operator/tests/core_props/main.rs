//! Property tests of the scheduling core over random clusters and queues: no resource is
//! given twice, gangs start whole or not at all, a gang that fits one leaf is never spread,
//! exclusive nodes are not shared, backfilled jobs never delay a reservation, and decisions
//! do not depend on the order of the input.

use std::collections::{BTreeMap, BTreeSet};

use muster_operator::core::shape::{Mode, Res, normalize};
use muster_operator::core::*;
use proptest::prelude::*;

const NOW: i64 = 10_000_000;
const LEAF: &str = "muster.dev/leaf";

mod checks;
mod inputs;
mod properties;

use checks::*;
use inputs::*;
