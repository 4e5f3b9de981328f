fn main() -> anyhow::Result<()> {
    muster_cli::run()
}
