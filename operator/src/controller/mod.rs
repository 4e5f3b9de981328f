//! The kube-runtime side of the operator: reflectors feed the scheduling [`core`](crate::core),
//! the leader carries out its decisions.

pub mod deps;
pub mod exec;
pub mod plan;
pub mod pods;
pub mod quantity;
pub mod status;
pub mod translate;

#[cfg(test)]
mod fake;
#[cfg(test)]
mod plan_tests;
