//! The same program as `muster`, named so that `kubectl muster ...` finds it as a plugin.
fn main() -> anyhow::Result<()> {
    muster_cli::run()
}
