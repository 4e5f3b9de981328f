//! The command line (every option also has an environment variable, for the DaemonSet).

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};
use jiff::SignedDuration;

use crate::enforce::Policy;
use crate::xid::{self, XidPolicy};

/// Muster's node agent: publishes the node's GPUs (NVML) as a GpuNode, tracks their health,
/// labels the Node, and enforces per-task GPU binding.
#[derive(Parser, Debug, Clone)]
#[command(name = "muster-node-agent", version, about, long_about = None)]
pub struct Cli {
    /// Print what the inventory backend sees and exit (same as the `inventory` command).
    #[arg(long, global = true)]
    pub check: bool,

    /// Use this YAML fixture instead of NVML (see node-agent/fixtures/).
    #[arg(long, env = "MUSTER_FIXTURE", value_name = "FILE", global = true)]
    pub fixture: Option<PathBuf>,

    /// Where sysfs is (PCI NUMA nodes are read there when NVML does not report them).
    #[arg(long, env = "MUSTER_SYS_ROOT", default_value = "/sys", global = true)]
    pub sys_root: PathBuf,

    /// Log format.
    #[arg(long, env = "MUSTER_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,

    /// Options of the agent itself.
    #[command(flatten)]
    pub run: RunArgs,

    /// What to do (default: run the agent).
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Subcommands.
#[derive(Subcommand, Debug, Clone)]
pub enum Command {
    /// Run the agent (the default).
    Run,
    /// Print what NVML (or the fixture) sees — GPUs, topology, processes, the labels the
    /// agent would set — and exit. The command to verify the NVML backend on a GPU node.
    Inventory {
        /// Output format.
        #[arg(long, short, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
}

/// Log output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// `inventory` output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Tables, like nvidia-smi.
    Table,
    /// YAML.
    Yaml,
    /// JSON.
    Json,
}

/// Options of the running agent.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// The Node this agent runs on (the DaemonSet passes spec.nodeName).
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,

    /// What to do about a process on a GPU its pod was not given.
    #[arg(long, env = "MUSTER_POLICY", value_enum, default_value_t = Policy::Report)]
    pub policy: Policy,

    /// Longest time between two GpuNode status writes (a heartbeat), e.g. 30s.
    #[arg(long, env = "MUSTER_HEARTBEAT", default_value = "30s", value_parser = positive_duration)]
    pub heartbeat: SignedDuration,

    /// Time between polls of NVML, processes and pods, e.g. 5s.
    #[arg(long, env = "MUSTER_POLL_INTERVAL", default_value = "5s", value_parser = positive_duration)]
    pub poll_interval: SignedDuration,

    /// Fault-free time after which an Unhealthy GPU is Healthy again; 0 = only a reset
    /// brings it back.
    #[arg(long, env = "MUSTER_QUIET_PERIOD", default_value = "300s", value_parser = duration)]
    pub quiet_period: SignedDuration,

    /// XIDs that mark a GPU Unhealthy, comma-separated (replaces the default list).
    #[arg(long, env = "MUSTER_CRITICAL_XIDS", value_parser = xid_list, default_value_t = XidPolicy::default())]
    pub critical_xids: XidPolicy,

    /// The /proc of the host PID namespace (run with hostPID: true, or mount the host's /proc).
    #[arg(long, env = "MUSTER_PROC_ROOT", default_value = "/proc")]
    pub proc_root: PathBuf,
}

fn duration(s: &str) -> Result<SignedDuration, String> {
    if s.trim() == "0" {
        return Ok(SignedDuration::ZERO);
    }
    let d: SignedDuration = s.parse().map_err(|_| {
        format!("'{s}' is not a duration: use a number with a unit, such as 30s, 5m or 1h30m")
    })?;
    if d.is_negative() {
        return Err(format!("'{s}' is negative"));
    }
    Ok(d)
}

fn positive_duration(s: &str) -> Result<SignedDuration, String> {
    let d = duration(s)?;
    if d.is_zero() {
        return Err(format!("'{s}' must be longer than zero"));
    }
    Ok(d)
}

fn xid_list(s: &str) -> Result<XidPolicy, String> {
    xid::parse_xid_list(s).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_values() {
        let c = Cli::try_parse_from(["muster-node-agent", "--node-name", "gpu-a"]).unwrap();
        assert_eq!(c.run.node_name.as_deref(), Some("gpu-a"));
        assert_eq!(c.run.policy, Policy::Report);
        assert_eq!(c.run.heartbeat, SignedDuration::from_secs(30));
        assert_eq!(c.run.poll_interval, SignedDuration::from_secs(5));
        assert_eq!(c.run.quiet_period, SignedDuration::from_secs(300));
        assert_eq!(c.run.critical_xids, XidPolicy::default());
        assert_eq!(c.run.proc_root, PathBuf::from("/proc"));
        assert!(c.command.is_none());

        let c = Cli::try_parse_from([
            "muster-node-agent",
            "--node-name",
            "n",
            "--policy",
            "kill",
            "--heartbeat",
            "1m",
            "--quiet-period",
            "0",
            "--critical-xids",
            "48,79",
            "--proc-root",
            "/host/proc",
            "--fixture",
            "f.yaml",
        ])
        .unwrap();
        assert_eq!(c.run.policy, Policy::Kill);
        assert_eq!(c.run.heartbeat, SignedDuration::from_secs(60));
        assert!(c.run.quiet_period.is_zero());
        assert!(!c.run.critical_xids.is_critical(Some(63)));
        assert_eq!(c.fixture, Some(PathBuf::from("f.yaml")));
    }

    #[test]
    fn inventory_and_check() {
        let c = Cli::try_parse_from([
            "muster-node-agent",
            "inventory",
            "-o",
            "yaml",
            "--fixture",
            "x.yaml",
        ])
        .unwrap();
        assert!(matches!(
            c.command,
            Some(Command::Inventory {
                output: Output::Yaml
            })
        ));
        assert_eq!(c.fixture, Some(PathBuf::from("x.yaml")));
        let c = Cli::try_parse_from(["muster-node-agent", "--check"]).unwrap();
        assert!(c.check);
    }

    #[test]
    fn bad_values_are_explained() {
        let e = Cli::try_parse_from(["muster-node-agent", "--heartbeat", "soon"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("'soon' is not a duration"), "{e}");
        let e = Cli::try_parse_from(["muster-node-agent", "--heartbeat", "0s"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("must be longer than zero"), "{e}");
        let e = Cli::try_parse_from(["muster-node-agent", "--policy", "maim"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("report") && e.contains("kill"), "{e}");
        let e = Cli::try_parse_from(["muster-node-agent", "--critical-xids", "48,x"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("not an XID list"), "{e}");
    }
}
