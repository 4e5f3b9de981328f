//! The job as the node pod's environment describes it (the contract in the
//! [module docs](super)).

use std::collections::BTreeMap;
use std::path::PathBuf;

use muster_crds::slurm::hostlist;

use super::binding::NodeGpus;
use super::layout::{Allocation, expand_counts};

/// Where the credential is read when `MUSTER_STEP_KEY_FILE` is unset (the contract's, shared
/// with the operator in `muster_crds::step`).
pub const DEFAULT_KEY_FILE: &str = muster_crds::step::KEY_FILE;
/// The daemons' TCP port when `MUSTER_STEP_PORT` is unset.
pub const DEFAULT_PORT: u16 = muster_crds::step::DEFAULT_PORT;
/// Variables whose value on each node is that node's own (from its pod's environment), not
/// the launching srun's: the daemon sets them on every task it starts.
pub const NODE_VARS: &[&str] = &[
    "SLURMD_NODENAME",
    "SLURM_CPUS_ON_NODE",
    "SLURM_GPUS_ON_NODE",
    "SLURM_JOB_GPUS",
    "SLURM_TOPOLOGY_ADDR",
    "SLURM_TOPOLOGY_ADDR_PATTERN",
    "HOSTNAME",
    "NVIDIA_VISIBLE_DEVICES",
    "MUSTER_POD_IP",
    "MUSTER_NODE_GPUS",
];

/// A variable lookup (the process environment, or a map in tests).
pub trait Env {
    /// The value of `k`, if set.
    fn get(&self, k: &str) -> Option<String>;
}

/// The process environment.
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn get(&self, k: &str) -> Option<String> {
        std::env::var(k).ok()
    }
}

impl Env for BTreeMap<String, String> {
    fn get(&self, k: &str) -> Option<String> {
        BTreeMap::get(self, k).cloned()
    }
}

/// The job's shape and the step channel's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Job {
    /// `SLURM_JOB_ID`.
    pub id: String,
    /// Node names from `SLURM_JOB_NODELIST`, in order (the first is the batch host).
    pub nodes: Vec<String>,
    /// CPUs per node (`SLURM_JOB_CPUS_PER_NODE`, else tasks per node times
    /// `SLURM_CPUS_PER_TASK`).
    pub cpus: Vec<u32>,
    /// Tasks per node (`SLURM_TASKS_PER_NODE`).
    pub tasks: Vec<u32>,
    /// The daemons' port (`MUSTER_STEP_PORT`).
    pub port: u16,
    /// The credential file (`MUSTER_STEP_KEY_FILE`).
    pub key_file: PathBuf,
}

fn need(env: &dyn Env, k: &str) -> Result<String, String> {
    env.get(k).filter(|v| !v.is_empty()).ok_or_else(|| {
        format!("{k} is not set: this command runs inside a Muster job (a node pod of a BatchJob), where the operator sets it")
    })
}

impl Job {
    /// Reads the job from `env`.
    pub fn from_env(env: &dyn Env) -> Result<Job, String> {
        let id = need(env, "SLURM_JOB_ID").or_else(|e| need(env, "SLURM_JOBID").map_err(|_| e))?;
        let list = need(env, "SLURM_JOB_NODELIST")
            .or_else(|e| need(env, "SLURM_NODELIST").map_err(|_| e))?;
        let nodes = hostlist::expand(&list).map_err(|e| format!("SLURM_JOB_NODELIST: {e}"))?;
        let n = nodes.len();
        let counts = |k: &str, v: &str| -> Result<Vec<u32>, String> {
            let c = expand_counts(v).map_err(|e| format!("{k}: {e}"))?;
            if c.len() != n {
                return Err(format!(
                    "{k}={v} gives {} node(s) but SLURM_JOB_NODELIST has {n}",
                    c.len()
                ));
            }
            Ok(c)
        };
        // Inside a step SLURM_TASKS_PER_NODE is the step's (srun sets it): only the job-wide
        // SLURM_JOB_CPUS_PER_NODE describes the allocation there.
        let tasks = env
            .get("SLURM_TASKS_PER_NODE")
            .and_then(|v| counts("SLURM_TASKS_PER_NODE", &v).ok());
        let cpus = match env.get("SLURM_JOB_CPUS_PER_NODE") {
            Some(v) => counts("SLURM_JOB_CPUS_PER_NODE", &v)?,
            None => {
                let cpt = env
                    .get("SLURM_CPUS_PER_TASK")
                    .and_then(|c| c.parse::<u32>().ok())
                    .unwrap_or(1)
                    .max(1);
                match &tasks {
                    Some(t) => t.iter().map(|t| t.max(&1) * cpt).collect(),
                    None => match env.get("SLURM_TASKS_PER_NODE") {
                        Some(v) => {
                            return Err(counts("SLURM_TASKS_PER_NODE", &v)
                                .err()
                                .unwrap_or_default());
                        }
                        None => vec![cpt; n],
                    },
                }
            }
        };
        let tasks = tasks.unwrap_or_else(|| vec![1; n]);
        let port = match env.get(muster_crds::step::ENV_PORT) {
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| format!("MUSTER_STEP_PORT={p} is not a TCP port"))?,
            None => DEFAULT_PORT,
        };
        let key_file = env
            .get(muster_crds::step::ENV_KEY_FILE)
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| DEFAULT_KEY_FILE.into())
            .into();
        Ok(Job {
            id,
            nodes,
            cpus,
            tasks,
            port,
            key_file,
        })
    }

    /// The allocation for step layouts.
    pub fn allocation(&self) -> Allocation {
        Allocation {
            job_id: self.id.clone(),
            nodes: self.nodes.clone(),
            cpus: self.cpus.clone(),
        }
    }

    /// The batch host (node 0), which numbers the steps.
    pub fn batch_host(&self) -> &str {
        &self.nodes[0]
    }
}

/// What the daemon knows about its own node.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// Its name in the nodelist (`SLURMD_NODENAME`, else the host name).
    pub name: String,
    /// Its index in the job's nodes.
    pub index: usize,
    /// The job's GPUs here (`MUSTER_NODE_GPUS`; none when unset).
    pub gpus: NodeGpus,
    /// Its pod's values of [`NODE_VARS`].
    pub vars: Vec<(String, String)>,
}

impl Node {
    /// Reads the node from `env` (`hostname`: the system's host name).
    pub fn from_env(env: &dyn Env, job: &Job, hostname: &str) -> Result<Node, String> {
        let name = env
            .get("SLURMD_NODENAME")
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| hostname.to_string());
        let index = job.nodes.iter().position(|n| *n == name).ok_or_else(|| {
            format!(
                "this node is {name:?} (SLURMD_NODENAME, else the host name) but SLURM_JOB_NODELIST is {}: the node pod's name must be one of the job's node names",
                hostlist::compress(&job.nodes)
            )
        })?;
        let gpus = match env
            .get(muster_crds::step::ENV_NODE_GPUS)
            .filter(|v| !v.trim().is_empty())
        {
            Some(j) => NodeGpus::parse(&j)?,
            None => NodeGpus::default(),
        };
        let mut vars: Vec<(String, String)> = NODE_VARS
            .iter()
            .filter_map(|k| env.get(k).map(|v| (k.to_string(), v)))
            .collect();
        if !vars.iter().any(|(k, _)| k == "SLURMD_NODENAME") {
            vars.push(("SLURMD_NODENAME".into(), name.clone()));
        }
        if !vars.iter().any(|(k, _)| k == "HOSTNAME") {
            vars.push(("HOSTNAME".into(), hostname.to_string()));
        }
        if !vars.iter().any(|(k, _)| k == "SLURM_CPUS_ON_NODE") {
            vars.push(("SLURM_CPUS_ON_NODE".into(), job.cpus[index].to_string()));
        }
        Ok(Node {
            name,
            index,
            gpus,
            vars,
        })
    }
}

/// The system's host name.
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_job_reads_from_the_contract_variables() {
        let e = env(&[
            ("SLURM_JOB_ID", "7"),
            ("SLURM_JOB_NODELIST", "train-[0-2]"),
            ("SLURM_TASKS_PER_NODE", "2(x3)"),
            ("SLURM_CPUS_PER_TASK", "4"),
            ("MUSTER_STEP_PORT", "7000"),
        ]);
        let j = Job::from_env(&e).unwrap();
        assert_eq!(j.nodes, ["train-0", "train-1", "train-2"]);
        assert_eq!(j.cpus, [8, 8, 8]);
        assert_eq!((j.port, j.batch_host()), (7000, "train-0"));
        assert_eq!(j.key_file, PathBuf::from(DEFAULT_KEY_FILE));
        let n = Node::from_env(&e, &j, "train-1").unwrap();
        assert_eq!((n.name.as_str(), n.index), ("train-1", 1));
        assert!(n.vars.contains(&("SLURM_CPUS_ON_NODE".into(), "8".into())));
    }

    #[test]
    fn missing_and_inconsistent_variables_are_named() {
        let e = Job::from_env(&env(&[("SLURM_JOB_ID", "7")])).unwrap_err();
        assert!(e.contains("SLURM_JOB_NODELIST"), "{e}");
        let e = Job::from_env(&env(&[
            ("SLURM_JOB_ID", "7"),
            ("SLURM_JOB_NODELIST", "a,b"),
            ("SLURM_TASKS_PER_NODE", "2"),
        ]))
        .unwrap_err();
        assert!(e.contains("SLURM_TASKS_PER_NODE=2 gives 1 node(s)"), "{e}");
        let ok = env(&[("SLURM_JOB_ID", "7"), ("SLURM_JOB_NODELIST", "a,b")]);
        let j = Job::from_env(&ok).unwrap();
        let e = Node::from_env(&ok, &j, "c").unwrap_err();
        assert!(e.contains("\"c\"") && e.contains("a,b"), "{e}");
    }
}
