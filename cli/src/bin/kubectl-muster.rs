//! The same program as `muster`, named so that `kubectl muster ...` finds it as a plugin.
fn main() -> std::process::ExitCode {
    muster_cli::run()
}
