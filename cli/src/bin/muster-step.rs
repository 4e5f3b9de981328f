//! `muster-step`: the in-pod step runtime (`srun`, `scontrol show hostnames`, the node daemon);
//! see `muster_cli::step`.
fn main() {
    std::process::exit(muster_cli::step::main());
}
