//! The node agent end to end against the test control plane (`muster-e2e`'s API server
//! double): its real kube client code, a fixture backend, a fake `/proc`, and its clock given
//! as the `now` of each poll (no sleeps).

mod binary;
mod enforcement;
mod health;
mod inventory;
mod support;
