//! The kube-runtime side of the operator: reflectors feed the scheduling [`core`](crate::core),
//! the leader carries out its decisions.

pub mod pods;
pub mod quantity;
pub mod translate;
