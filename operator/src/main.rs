//! `muster-operator`: the Muster operator binary. Flags are a contract with the Helm chart.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, ValueEnum};
use muster_operator::controller::{self, Settings, http, metrics::Metrics, scheduler_config};

/// mimalloc rather than glibc's malloc: the operator's bursts (a cycle admitting thousands of
/// gangs builds and drops their pods and request bodies; reflectors decode whole lists) left
/// glibc's per-thread arenas fragmented, and the resident size at its peak. Measured with
/// `operator_bench` at 16,384 nodes: glibc RSS 255-274 MiB (peak 260-274), mimalloc with the
/// options of [`tune_allocator`] 204-207 MiB (peak 234-237), and the gangs start no later.
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Freed memory goes back to the system at once (mimalloc's default waits 10 ms, arenas 100
/// ms: a burst's garbage then counts in the peak), and arenas are committed as they are used.
/// Run as an ELF constructor, before Rust's runtime makes its first allocation and with it
/// mimalloc's first arena (set in `main`, the arena option came too late: peak 253-257 MiB).
/// By hand rather than with the `ctor` crate: one function pointer in `.init_array` is all
/// it takes on Linux.
#[cfg(not(feature = "system-allocator"))]
extern "C" fn tune_allocator() {
    use muster_operator::alloc::{MiOption, set};
    set(MiOption::PurgeDelay, 0);
    set(MiOption::ArenaEagerCommit, 0);
}

#[cfg(all(target_os = "linux", not(feature = "system-allocator")))]
#[used]
#[unsafe(link_section = ".init_array")]
static TUNE_ALLOCATOR: extern "C" fn() = tune_allocator;

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// Slurm-style gang scheduling for Kubernetes GPU clusters: watches BatchJobs, Partitions,
/// Nodes, GpuNodes and task Pods; the elected leader schedules and runs the jobs.
#[derive(Debug, Parser)]
#[command(name = "muster-operator", version)]
struct Args {
    /// Namespace of the leader Lease and the job id / fair-share ConfigMaps.
    #[arg(long, env = "MUSTER_NAMESPACE", default_value = "muster-system")]
    namespace: String,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "muster-operator")]
    lease_name: String,
    /// Do not elect a leader: this replica schedules (run only one such replica).
    #[arg(long)]
    no_leader_election: bool,
    /// Address of the /metrics, /healthz and /readyz server.
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_addr: SocketAddr,
    /// Longest time between two scheduling cycles (cycles also run on every change), e.g.
    /// 5s, 500ms, 1m.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    cycle_interval: Duration,
    /// How long a gang's pods may take to all be Running before the job is requeued.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    gang_start_timeout: Duration,
    /// Log format.
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
    /// This replica's identity in the Lease (the pod name).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Address of the admission webhooks (HTTPS).
    #[arg(long, default_value = "0.0.0.0:9443")]
    webhook_addr: SocketAddr,
    /// Do not serve the admission webhooks (submissions are then not checked at admission
    /// and jobs record no submitter).
    #[arg(long)]
    no_webhook: bool,
    /// The webhook Service in --namespace (its certificate is for SERVICE.NAMESPACE.svc).
    #[arg(long, default_value = "muster-operator-webhook")]
    webhook_service: String,
    /// The Secret in --namespace holding the webhook's CA and serving certificate.
    #[arg(long, default_value = "muster-webhook-tls")]
    webhook_secret: String,
    /// The Mutating- and ValidatingWebhookConfiguration whose caBundle the operator sets.
    #[arg(long, default_value = "muster")]
    webhook_configuration: String,
    /// The scheduler's configuration: YAML with the keys backfill, maxReservations,
    /// reserveAfterSecs, preemption, weightAge, ... (see the chart's README); omitted keys
    /// keep their defaults; an unknown key or bad value stops the operator at startup.
    #[arg(long, value_name = "FILE")]
    scheduler_config: Option<PathBuf>,
    /// The image node pods copy `muster-step` (srun, the node daemon) from: the operator's own
    /// (the chart sets it).
    #[arg(long, env = "MUSTER_STEP_IMAGE", default_value = muster_operator::controller::pods::DEFAULT_STEP_IMAGE)]
    step_image: String,
    /// The cluster's DNS domain: node pods resolve each other's short names under
    /// `<job>.<namespace>.svc.<domain>`.
    #[arg(long, env = "MUSTER_CLUSTER_DOMAIN", default_value = "cluster.local")]
    cluster_domain: String,
    /// A group whose members are administrators: they may set a job's --priority or a
    /// negative --nice (repeat the flag for several groups).
    #[arg(long = "admin-group", value_name = "GROUP", default_values_t = [muster_operator::controller::admission::MASTERS.to_string()])]
    admin_groups: Vec<String>,
    /// A user who is an administrator (repeat the flag for several users).
    #[arg(long = "admin-user", value_name = "USER")]
    admin_users: Vec<String>,
}

/// `5s`, `500ms`, `2m`, `1h` (a bare number is seconds).
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map(|i| s.split_at(i))
        .unwrap_or((s, "s"));
    let v: f64 = num
        .parse()
        .map_err(|_| format!("invalid duration {s:?}: expected a number and ms, s, m or h"))?;
    let secs = match unit {
        "ms" => v / 1000.0,
        "s" => v,
        "m" => v * 60.0,
        "h" => v * 3600.0,
        _ => {
            return Err(format!(
                "invalid duration {s:?}: unit must be ms, s, m or h"
            ));
        }
    };
    if !secs.is_finite() || secs <= 0.0 {
        return Err(format!("invalid duration {s:?}: must be positive"));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn init_logging(f: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let b = tracing_subscriber::fmt().with_env_filter(filter);
    match f {
        LogFormat::Text => b.init(),
        LogFormat::Json => b.json().init(),
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(t) => t,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    init_logging(args.log_format);
    // Before anything else: a bad knob stops the operator before it schedules with defaults.
    let scheduler = match &args.scheduler_config {
        Some(p) => scheduler_config::load(p).context("--scheduler-config")?,
        None => Default::default(),
    };
    let client = kube::Client::try_default()
        .await
        .context("connecting to the Kubernetes API (in-cluster config or KUBECONFIG)")?;
    let identity = args.identity.clone().unwrap_or_else(|| {
        std::env::var("HOSTNAME")
            .unwrap_or_else(|_| format!("muster-operator-{}", std::process::id()))
    });
    let mut settings = Settings {
        namespace: args.namespace.clone(),
        lease_name: args.lease_name.clone(),
        leader_election: !args.no_leader_election,
        identity,
        cycle_interval: args.cycle_interval,
        ..Settings::default()
    };
    settings.plan.gang_start_timeout_secs = args.gang_start_timeout.as_secs().max(1) as i64;
    tracing::info!(?args, ?scheduler, "starting");
    settings.plan.scheduler = scheduler;
    settings.plan.step = muster_operator::controller::pods::StepSettings {
        image: args.step_image.clone(),
        cluster_domain: args.cluster_domain.clone(),
    };
    let metrics = Metrics::new();
    let handle = controller::start(client.clone(), settings, metrics.clone());
    let (hook_tx, hook_rx) = tokio::sync::oneshot::channel::<()>();
    let webhook = if args.no_webhook {
        None
    } else {
        let ws = controller::webhook::WebhookSettings {
            addr: args.webhook_addr,
            namespace: args.namespace.clone(),
            service: args.webhook_service.clone(),
            secret: args.webhook_secret.clone(),
            configuration: args.webhook_configuration.clone(),
            refresh: Duration::from_secs(300),
            admins: controller::admission::Admins {
                groups: args.admin_groups.clone(),
                users: args.admin_users.clone(),
            },
        };
        let hook = controller::webhook::Webhook::bind(
            client,
            ws,
            handle.stores.clone(),
            handle.ready.clone(),
        )
        .await
        .context("starting the admission webhooks")?;
        Some(tokio::spawn(hook.serve(async {
            let _ = hook_rx.await;
        })))
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(http::serve(
        args.metrics_addr,
        metrics,
        handle.ready.clone(),
        async {
            let _ = stop_rx.await;
        },
    ));
    shutdown_signal().await;
    tracing::info!("shutting down");
    let r = handle.shutdown().await;
    let _ = stop_tx.send(());
    let _ = hook_tx.send(());
    let _ = server.await;
    if let Some(w) = webhook {
        let _ = w.await;
    }
    r.context("operator stopped")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_like_the_chart_writes_them() {
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert!(parse_duration("5d").unwrap_err().contains("unit"));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("x").is_err());
    }

    #[test]
    fn flags_match_the_chart() {
        let a = Args::try_parse_from([
            "muster-operator",
            "--namespace",
            "muster",
            "--lease-name",
            "l",
            "--no-leader-election",
            "--metrics-addr",
            "127.0.0.1:9090",
            "--cycle-interval",
            "2s",
            "--gang-start-timeout",
            "10m",
            "--log-format",
            "json",
            "--identity",
            "pod-1",
            "--webhook-addr",
            "0.0.0.0:9443",
            "--webhook-service",
            "muster-operator-webhook",
            "--webhook-secret",
            "muster-webhook-tls",
            "--webhook-configuration",
            "muster",
            "--scheduler-config",
            "/etc/muster/scheduler.yaml",
            "--admin-group",
            "hpc-admins",
            "--admin-group",
            "system:masters",
            "--admin-user",
            "root",
        ])
        .unwrap();
        assert_eq!(a.admin_groups, ["hpc-admins", "system:masters"]);
        assert_eq!(a.admin_users, ["root"]);
        let d = Args::try_parse_from(["muster-operator"]).unwrap();
        assert_eq!(d.admin_groups, ["system:masters"]);
        assert!(d.admin_users.is_empty());
        assert_eq!(a.namespace, "muster");
        assert!(a.no_leader_election);
        assert_eq!(a.gang_start_timeout, Duration::from_secs(600));
        assert!(matches!(a.log_format, LogFormat::Json));
        assert_eq!(a.identity.as_deref(), Some("pod-1"));
        assert_eq!(
            a.scheduler_config.as_deref(),
            Some(std::path::Path::new("/etc/muster/scheduler.yaml"))
        );
        assert!(Args::try_parse_from(["muster-operator", "--log-format", "xml"]).is_err());
    }
}
