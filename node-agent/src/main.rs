//! `muster-node-agent`: see `node-agent/README.md`.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use jiff::Timestamp;
use muster_node_agent::cli::{Cli, Command, LogFormat, Output};
use muster_node_agent::inventory::{
    FixtureInventory, GpuInventory, NvmlInventory, NvmlUnavailable,
};
use muster_node_agent::publish::{self, Readiness};
use muster_node_agent::{Agent, AgentConfig, HealthConfig, SignalKiller, check, kube_io};

/// Exit code when NVML cannot be used (no driver, library missing) and no fixture was given.
const EXIT_NVML_UNAVAILABLE: u8 = 3;

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the async runtime");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(real_main(cli)) {
        Ok(code) => code,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

async fn real_main(cli: Cli) -> anyhow::Result<ExitCode> {
    let inventory: Box<dyn GpuInventory> = match &cli.fixture {
        Some(path) => Box::new(FixtureInventory::load(path)?),
        None => match NvmlInventory::init(&cli.sys_root) {
            Ok(n) => Box::new(n),
            Err(e) => {
                // The one clear line: what is missing and how to go on.
                tracing::error!("{e}");
                if !cli.check && !matches!(cli.command, Some(Command::Inventory { .. })) {
                    report_unavailable(&cli, &e).await;
                }
                return Ok(ExitCode::from(EXIT_NVML_UNAVAILABLE));
            }
        },
    };

    let output = match cli.command {
        Some(Command::Inventory { output }) => Some(output),
        _ if cli.check => Some(Output::Table),
        _ => None,
    };
    if let Some(output) = output {
        return inventory_command(inventory, output);
    }

    let node_name = cli.run.node_name.clone().context(
        "--node-name (or NODE_NAME) is required to run the agent; `inventory` needs none",
    )?;
    let cfg = AgentConfig {
        node_name: node_name.clone(),
        policy: cli.run.policy,
        heartbeat: cli.run.heartbeat,
        poll_interval: cli.run.poll_interval,
        health: HealthConfig {
            quiet_period: cli.run.quiet_period,
            xids: cli.run.critical_xids.clone(),
        },
        proc_root: cli.run.proc_root.clone(),
    };
    tracing::info!(
        node = %node_name,
        backend = %inventory.describe(),
        policy = %cfg.policy,
        heartbeat = %format!("{:#}", cfg.heartbeat),
        quiet_period = %format!("{:#}", cfg.health.quiet_period),
        critical_xids = %cfg.health.xids,
        "starting"
    );
    let client = kube::Client::try_default()
        .await
        .context("connecting to the Kubernetes API")?;
    let agent = Agent::new(
        client,
        cfg,
        inventory,
        Arc::new(SignalKiller),
        Timestamp::now(),
    )
    .await
    .context("starting the agent")?;
    agent.run(shutdown_signal()).await;
    Ok(ExitCode::SUCCESS)
}

fn inventory_command(
    mut inventory: Box<dyn GpuInventory>,
    output: Output,
) -> anyhow::Result<ExitCode> {
    let obs = inventory
        .observe(Timestamp::now())
        .context("polling the inventory")?;
    let report = check::report(inventory.describe(), &obs);
    let text = match output {
        Output::Table => check::table(&report),
        Output::Yaml => serde_yaml::to_string(&report)?,
        Output::Json => serde_json::to_string_pretty(&report)? + "\n",
    };
    print!("{text}");
    Ok(ExitCode::SUCCESS)
}

/// Best effort: mark the GpuNode not Ready with the reason, so `kubectl get gpunodes` and the
/// operator see why this node has no inventory (the log line stays the primary report).
async fn report_unavailable(cli: &Cli, e: &NvmlUnavailable) {
    let Some(node) = cli.run.node_name.clone() else {
        return;
    };
    let attempt = async {
        let client = kube::Client::try_default().await.ok()?;
        kube_io::apply_gpunode(&client, &node).await.ok()?;
        let readiness = Readiness {
            ready: false,
            reason: "NvmlUnavailable".into(),
            message: e.to_string(),
        };
        let status = publish::desired_status(
            &Default::default(),
            &Default::default(),
            vec![],
            0,
            &readiness,
            Timestamp::now(),
            None,
        );
        kube_io::apply_status(&client, &node, &status).await.ok()
    };
    if tokio::time::timeout(Duration::from_secs(10), attempt)
        .await
        .ok()
        .flatten()
        .is_none()
    {
        tracing::debug!("could not mark the GpuNode not Ready");
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // Without signal handlers, run until killed.
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM"),
        _ = int.recv() => tracing::info!("SIGINT"),
    }
}
