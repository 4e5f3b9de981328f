//! `muster logs JOBID`: the job's output — what a Slurm user would read in
//! `slurm-JOBID.out` — from the log of its first node pod, where the batch script runs and
//! every `srun` step's output is forwarded (as to Slurm's batch host).

use clap::Args;
use futures::{AsyncBufReadExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, LogParams};
use muster_crds::labels;
use muster_crds::v1alpha1::{BatchJob, JobState};

use crate::Io;
use crate::cluster::Target;
use crate::sbatch::manifest::TASK_CONTAINER;

/// `muster logs`
#[derive(Args, Clone, Debug, Default, PartialEq, Eq)]
#[command(about = "Print a job's output (what slurm-JOBID.out would hold)")]
pub struct LogsArgs {
    /// The job: `123` or, for an array element, `123_4`.
    #[arg(value_name = "JOBID")]
    pub job_id: String,

    /// The output of the node pod running this task (rank); the batch script's, with every
    /// step's output, is rank 0's node's.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub rank: u32,

    /// Every node pod's output, each line prefixed with the node's first rank (`RANK: `).
    #[arg(long = "all-ranks", conflicts_with_all = ["rank", "follow"])]
    pub all_ranks: bool,

    /// Keep printing as the task writes.
    #[arg(short = 'f', long)]
    pub follow: bool,

    /// Only the last N lines.
    #[arg(long, value_name = "N")]
    pub tail: Option<i64>,

    /// Look for the job in every namespace.
    #[arg(long = "all-namespaces")]
    pub all_namespaces: bool,
}

/// Prefix every line with `RANK: `, as `srun --label` does.
pub fn label_lines(rank: u32, text: &str) -> String {
    text.lines().map(|l| format!("{rank}: {l}\n")).collect()
}

/// The node pod running `rank` of a job: from the allocation in its status, else by labels.
async fn pod_of(client: &kube::Client, bj: &BatchJob, rank: u32) -> anyhow::Result<String> {
    let ns = bj.metadata.namespace.clone().unwrap_or_default();
    let st = bj.status.clone().unwrap_or_default();
    if let Some(pod) = st
        .tasks
        .iter()
        .find(|t| t.rank == rank)
        .and_then(|t| t.pod.clone())
    {
        return Ok(pod);
    }
    let id = st
        .job_id
        .ok_or_else(|| anyhow::anyhow!("the job has no id yet"))?;
    // One pod per node: the rank's node index picks it (node 0, the batch host, by default).
    let node = st
        .tasks
        .iter()
        .find(|t| t.rank == rank)
        .map(|t| t.node_rank)
        .unwrap_or(0);
    let mut selector = format!("{}={id},{}={node}", labels::JOB_ID, labels::NODE_RANK);
    if let Some(a) = st.attempt {
        selector.push_str(&format!(",{}={a}", labels::ATTEMPT));
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let list = pods.list(&ListParams::default().labels(&selector)).await?;
    list.items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .next()
        .ok_or_else(|| {
            anyhow::anyhow!("no pod for rank {rank} of job {id} (it may have been deleted)")
        })
}

async fn fetch_log(pods: &Api<Pod>, pod: &str, lp: &LogParams) -> Result<String, kube::Error> {
    match pods.logs(pod, lp).await {
        // A template may name its first container differently: use the pod's default.
        Err(kube::Error::Api(s)) if s.code == 400 && lp.container.is_some() => {
            let lp = LogParams {
                container: None,
                ..lp.clone()
            };
            pods.logs(pod, &lp).await
        }
        other => other,
    }
}

/// Run `muster logs`.
pub async fn run(args: &LogsArgs, target: &Target<'_>, io: &mut Io<'_>) -> anyhow::Result<()> {
    let cluster = target.cluster(io.env).await?;
    let jobs = crate::fetch::batchjobs(&cluster, args.all_namespaces).await?;
    let rows = crate::rows::job_rows(&jobs, jiff::Timestamp::now(), true);
    let matches: Vec<_> = rows
        .iter()
        .filter(|r| r.matches_id(&args.job_id))
        .filter(|r| r.array_task_str.is_none())
        .collect();
    let row = match matches.as_slice() {
        [] => anyhow::bail!("Invalid job id specified: {}", args.job_id),
        [one] => *one,
        many => {
            let ids: Vec<String> = many.iter().map(|r| r.id_string()).collect();
            anyhow::bail!(
                "job {} is an array: name one element ({})",
                args.job_id,
                ids.join(", ")
            );
        }
    };
    if row.state == JobState::Pending {
        anyhow::bail!(
            "job {} has not started (PENDING, reason {})",
            row.id_string(),
            row.reason
        );
    }
    let bj = jobs
        .iter()
        .find(|b| {
            b.metadata.name.as_deref() == Some(row.name.as_str())
                && b.metadata.namespace.as_deref().unwrap_or_default() == row.namespace
        })
        .ok_or_else(|| anyhow::anyhow!("job {} vanished", row.id_string()))?;
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), &row.namespace);
    let lp = LogParams {
        container: Some(TASK_CONTAINER.to_string()),
        tail_lines: args.tail,
        follow: args.follow,
        ..LogParams::default()
    };
    if args.all_ranks {
        let mut seen = std::collections::BTreeSet::new();
        for rank in 0..row.num_tasks.max(1) {
            let pod = pod_of(&cluster.client, bj, rank).await?;
            if !seen.insert(pod.clone()) {
                continue;
            }
            let text = fetch_log(&pods, &pod, &lp).await?;
            write!(io.out, "{}", label_lines(rank, &text))?;
        }
        return Ok(());
    }
    let pod = pod_of(&cluster.client, bj, args.rank).await?;
    if args.follow {
        let mut lines = pods.log_stream(&pod, &lp).await?.lines();
        while let Some(line) = lines.try_next().await? {
            writeln!(io.out, "{line}")?;
        }
        return Ok(());
    }
    let text = fetch_log(&pods, &pod, &lp).await?;
    write!(io.out, "{text}")?;
    Ok(())
}
