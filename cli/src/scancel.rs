//! `scancel`: cancel jobs by id, name, user, partition or state. Sets `spec.cancel` (a merge
//! patch); the operator stops the tasks and keeps the record as CANCELLED. With `-s SIGNAL`
//! it signals running jobs instead (`-b` the batch shell, `-f` the batch shell with its
//! children and every step; by default every step's tasks): a request in the job's
//! annotation [`muster_crds::signals::ANNOTATION`], which reaches each node's step runtime
//! through the pods (see [`muster_crds::signals`]). `-s KILL` cancels, as in Slurm.

use clap::Args;
use kube::Api;
use kube::api::{Patch, PatchParams};
use std::collections::BTreeSet;

use muster_crds::slurm::ArraySpec;
use muster_crds::v1alpha1::BatchJob;

use crate::Io;
use crate::cluster::Target;
use crate::rows::JobRow;
use crate::squeue::{Filter, parse_states};
use muster_crds::signals::Target as SignalTarget;

/// `muster scancel`
#[derive(Args, Clone, Debug, Default, PartialEq, Eq)]
#[command(
    infer_long_args = true,
    args_override_self = true,
    about = "Cancel jobs (Slurm's scancel)"
)]
pub struct ScancelArgs {
    /// Jobs to cancel: `123` (an array id cancels every element), `123_4`, `123_[1-3,5]`.
    #[arg(value_name = "JOB_ID", value_delimiter = ',')]
    pub job_ids: Vec<String>,

    /// Look in every namespace (default: the current namespace).
    #[arg(long = "all-namespaces")]
    pub all_namespaces: bool,

    /// Only my jobs.
    #[arg(long = "me")]
    pub me: bool,

    /// Only jobs with this name.
    #[arg(
        short = 'n',
        long = "name",
        visible_alias = "jobname",
        value_name = "NAME"
    )]
    pub name: Option<String>,

    /// Only jobs in this partition.
    #[arg(short = 'p', long = "partition", value_name = "PARTITION")]
    pub partition: Option<String>,

    /// Send this signal (a name such as USR1 or a number) to running jobs instead of
    /// cancelling them; KILL cancels.
    #[arg(short = 's', long = "signal", value_name = "SIGNAL")]
    pub signal: Option<String>,

    /// With --signal: the batch shell only, not its children or the steps.
    #[arg(short = 'b', long = "batch")]
    pub batch: bool,

    /// With --signal: the batch shell and its children, and every step.
    #[arg(short = 'f', long = "full")]
    pub full: bool,

    /// Say nothing about jobs that cannot be cancelled.
    #[arg(short = 'Q', long = "quiet")]
    pub quiet: bool,

    /// Only jobs in this state (PENDING, RUNNING).
    #[arg(
        short = 't',
        long = "state",
        value_name = "STATE",
        value_delimiter = ','
    )]
    pub state: Vec<String>,

    /// Only this user's jobs.
    #[arg(short = 'u', long = "user", value_name = "USER")]
    pub user: Option<String>,

    /// Report each job cancelled.
    #[arg(short = 'v', long = "verbose")]
    pub verbose: bool,
}

/// What scancel would do: the jobs to patch, and the messages for ids it cannot act on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// `(namespace, BatchJob name, Slurm id)` to cancel.
    pub cancel: Vec<(String, String, String)>,
    /// `(namespace, array BatchJob name, array id, indices)`: tasks of an array that have
    /// not started, taken out of its `--array`.
    pub drop_tasks: Vec<(String, String, String, BTreeSet<u32>)>,
    /// Errors, as scancel prints them.
    pub errors: Vec<String>,
}

/// Decide which jobs to cancel (pure).
pub fn plan(args: &ScancelArgs, rows: &[JobRow], me: &str) -> Result<Plan, String> {
    let has_filter = args.name.is_some()
        || args.partition.is_some()
        || !args.state.is_empty()
        || args.user.is_some()
        || args.me;
    if args.job_ids.is_empty() && !has_filter {
        return Err("No job identification provided".into());
    }
    let states = parse_states(&args.state)?;
    let filter = Filter {
        jobs: Vec::new(),
        names: args.name.iter().cloned().collect(),
        partitions: args.partition.iter().cloned().collect(),
        states: if args.state.is_empty() { None } else { states },
        users: args
            .user
            .iter()
            .cloned()
            .chain(args.me.then(|| me.to_string()))
            .collect(),
    };
    let mut plan = Plan::default();
    let add = |r: &JobRow, plan: &mut Plan| {
        let key = (r.namespace.clone(), r.name.clone(), r.id_string());
        if !plan
            .cancel
            .iter()
            .any(|(n, m, _)| *n == key.0 && *m == key.1)
        {
            plan.cancel.push(key);
        }
    };
    if args.job_ids.is_empty() {
        for r in rows
            .iter()
            .filter(|r| !r.state.is_terminal() && filter.keep(r))
        {
            add(r, &mut plan);
        }
        return Ok(plan);
    }
    let ids = match crate::rows::ids::expand(&args.job_ids) {
        Ok(ids) => ids,
        Err(bad) => {
            plan.errors.push(format!(
                "Kill job error on job id {bad}: Invalid job id specified"
            ));
            return Ok(plan);
        }
    };
    for id in &ids {
        let matched: Vec<&JobRow> = rows.iter().filter(|r| r.matches_id(id)).collect();
        if matched.is_empty() {
            plan.errors.push(format!(
                "Kill job error on job id {id}: Invalid job id specified"
            ));
            continue;
        }
        if let Some((a, t)) = id.split_once('_')
            && let Some(r) = matched.iter().find(|r| r.array_record)
            && matched.iter().all(|r| r.array_record)
        {
            // A task not started yet: it leaves the array before it is created.
            if filter.keep(r) {
                let idx: u32 = t.parse().map_err(|_| format!("Invalid job id {id}"))?;
                match plan
                    .drop_tasks
                    .iter_mut()
                    .find(|(n, m, _, _)| *n == r.namespace && *m == r.name)
                {
                    Some((_, _, _, set)) => {
                        set.insert(idx);
                    }
                    None => plan.drop_tasks.push((
                        r.namespace.clone(),
                        r.name.clone(),
                        a.to_string(),
                        BTreeSet::from([idx]),
                    )),
                }
            }
            continue;
        }
        let active: Vec<&&JobRow> = matched
            .iter()
            .filter(|r| !r.state.is_terminal() && filter.keep(r))
            .collect();
        if active.is_empty() {
            if matched.iter().all(|r| r.state.is_terminal()) {
                plan.errors.push(format!(
                    "Kill job error on job id {id}: Job/step already completing or completed"
                ));
            }
            continue;
        }
        for r in active {
            add(r, &mut plan);
        }
    }
    Ok(plan)
}

/// `--array` text without the tasks `drop` (its `%N` kept); `None` when none are left.
pub fn without_tasks(array: &str, drop: &BTreeSet<u32>) -> Result<Option<String>, String> {
    let mut spec = ArraySpec::parse(array).map_err(|e| e.to_string())?;
    spec.indices.retain(|i| !drop.contains(i));
    Ok((!spec.indices.is_empty()).then(|| spec.to_string()))
}

/// Takes `drop` out of the array's `--array` (the whole array is cancelled when nothing is
/// left), from the version read.
async fn drop_array_tasks(
    api: &Api<BatchJob>,
    name: &str,
    drop: &BTreeSet<u32>,
) -> Result<(), String> {
    crate::job_patch::update(api, name, |job| {
        let array = crate::rows::int_or_str(&job.spec.array)
            .ok_or_else(|| format!("{name} is not an array"))?;
        Ok(match without_tasks(&array, drop)? {
            Some(a) => serde_json::json!({ "spec": { "array": a } }),
            None => serde_json::json!({ "spec": { "cancel": true } }),
        })
    })
    .await
}

/// A signal `-s` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignalAsk {
    /// Its number.
    pub number: i32,
    /// Its name (`USR1`).
    pub name: String,
    /// Whom it goes to.
    pub target: SignalTarget,
}

/// What `-s` asks for: `None` to cancel (no signal, or KILL), else the signal and whom it
/// goes to (`-f` wins over `-b`, as in Slurm). `Err`: scancel's message for an unknown signal.
pub fn signal_request(args: &ScancelArgs) -> Result<Option<SignalAsk>, String> {
    let Some(sig) = args.signal.as_deref() else {
        return Ok(None);
    };
    let (number, name) = muster_crds::slurm::signal::signal_number(sig)
        .ok_or_else(|| format!("Unknown job signal: {sig}"))?;
    if number == 9 {
        return Ok(None);
    }
    let target = if args.full {
        SignalTarget::Full
    } else if args.batch {
        SignalTarget::Batch
    } else {
        SignalTarget::Steps
    };
    Ok(Some(SignalAsk {
        number,
        name,
        target,
    }))
}

/// `ID.STEP` arguments apart from job ids: (job ids, (job id, step)).
pub fn split_steps(ids: &[String]) -> (Vec<String>, Vec<(String, u32)>) {
    let mut plain = Vec::new();
    let mut steps = Vec::new();
    for id in ids {
        match id
            .rsplit_once('.')
            .and_then(|(j, s)| Some((j, s.parse::<u32>().ok()?)))
            .filter(|(j, _)| !j.is_empty())
        {
            Some((j, s)) => steps.push((j.to_string(), s)),
            None => plain.push(id.clone()),
        }
    }
    (plain, steps)
}

/// `scancel [-s SIGNAL] ID.STEP`: the signal (SIGKILL without `-s`, which ends the step, as
/// Slurm's scancel does) to one step of a running job. `Ok(Err(message))`: refused.
async fn cancel_step(
    args: &ScancelArgs,
    cluster: &crate::cluster::Cluster,
    rows: &[JobRow],
    jid: &str,
    step: u32,
    io: &mut Io<'_>,
) -> anyhow::Result<Result<(), String>> {
    let sig = args.signal.clone().unwrap_or_else(|| "KILL".into());
    let Some((number, name)) = muster_crds::slurm::signal::signal_number(&sig) else {
        return Ok(Err(format!("Unknown job signal: {sig}")));
    };
    let matched: Vec<&JobRow> = rows
        .iter()
        .filter(|r| !r.array_record && r.matches_id(jid))
        .collect();
    let Some(r) = matched.iter().find(|r| !r.state.is_terminal()) else {
        return Ok(Err(if matched.is_empty() {
            "Invalid job id specified".into()
        } else {
            "Job/step already completing or completed".into()
        }));
    };
    let api: Api<BatchJob> = Api::namespaced(cluster.client.clone(), &r.namespace);
    if let Err(e) = signal_job(&api, &r.name, &name, SignalTarget::Step(step)).await {
        return Ok(Err(e));
    }
    if args.verbose {
        // Slurm's words: SIGKILL terminates the step, whether named or the default.
        if number == 9 {
            writeln!(io.err, "scancel: Terminating step {jid}.{step}")?;
        } else {
            writeln!(io.err, "scancel: Signal {number} to step {jid}.{step}")?;
        }
    }
    Ok(Ok(()))
}

/// Adds the request to a running job's annotation, from the version read.
async fn signal_job(
    api: &Api<BatchJob>,
    name: &str,
    signal: &str,
    to: SignalTarget,
) -> Result<(), String> {
    use kube::ResourceExt;
    use muster_crds::signals::{ANNOTATION, with_request};
    use muster_crds::v1alpha1::JobState;
    crate::job_patch::update(api, name, |job| {
        match job.state() {
            JobState::Running => {}
            s if s.is_terminal() => return Err("Job/step already completing or completed".into()),
            _ => return Err("Job can not be altered now, try again later".into()),
        }
        let existing = job.annotations().get(ANNOTATION).map(String::as_str);
        let text = with_request(existing, signal, to, jiff::Timestamp::now())?;
        Ok(serde_json::json!({ "metadata": { "annotations": { ANNOTATION: text } } }))
    })
    .await
}

/// Run `muster scancel`.
pub async fn run(args: &ScancelArgs, target: &Target<'_>, io: &mut Io<'_>) -> anyhow::Result<()> {
    let signal = match signal_request(args) {
        Ok(s) => s,
        Err(e) => {
            writeln!(io.err, "{e}")?;
            return Err(crate::Failed.into());
        }
    };
    let (plain, steps) = split_steps(&args.job_ids);
    let cluster = target.cluster(io.env).await?;
    let jobs = crate::fetch::batchjobs(&cluster, args.all_namespaces).await?;
    let rows = crate::rows::job_rows(&jobs, jiff::Timestamp::now(), true);
    let job_args = ScancelArgs {
        job_ids: plain,
        ..args.clone()
    };
    let plan = if job_args.job_ids.is_empty() && !steps.is_empty() {
        Plan::default()
    } else {
        plan(&job_args, &rows, &cluster.user).map_err(|e| anyhow::anyhow!(e))?
    };
    let mut failed = false;
    for (jid, step) in &steps {
        if let Err(e) = cancel_step(args, &cluster, &rows, jid, *step, io).await? {
            failed = true;
            if !args.quiet {
                writeln!(
                    io.err,
                    "scancel: error: Kill job error on job step id {jid}.{step}: {e}"
                )?;
            }
        }
    }
    if let Some(name) = &args.name
        && !rows.iter().any(|r| &r.job_name == name)
        && let Some(h) = crate::cluster::dash_n_hint(&cluster, "scancel", "job name", name).await
    {
        writeln!(io.err, "{h}")?;
    }
    let patch = serde_json::json!({ "spec": { "cancel": true } });
    for (ns, name, id) in &plan.cancel {
        let api: Api<BatchJob> = Api::namespaced(cluster.client.clone(), ns);
        if let Some(SignalAsk {
            number,
            name: sig,
            target: to,
        }) = &signal
        {
            let row = rows.iter().find(|r| &r.namespace == ns && &r.name == name);
            if let Some(r) = row.filter(|r| r.array_record) {
                // An array's tasks not started yet: nothing runs to be signalled. Said only
                // when none of its elements was signalled either.
                let elements = plan.cancel.iter().any(|(n, m, _)| {
                    rows.iter().any(|e| {
                        &e.namespace == n
                            && &e.name == m
                            && !e.array_record
                            && e.array_job_id.is_some()
                            && e.array_job_id == r.array_job_id
                    })
                });
                if !elements {
                    failed = true;
                    writeln!(
                        io.err,
                        "scancel: error: Kill job error on job id {id}: Job can not be altered now, try again later"
                    )?;
                }
                continue;
            }
            match signal_job(&api, name, sig, *to).await {
                Ok(()) => {
                    if args.verbose {
                        let whom = match to {
                            SignalTarget::Steps | SignalTarget::Step(_) => "",
                            SignalTarget::Batch => "batch ",
                            SignalTarget::Full => "full ",
                        };
                        writeln!(io.err, "scancel: Signal {number} to {whom}job {id}")?;
                    }
                }
                Err(e) => {
                    failed = true;
                    writeln!(io.err, "scancel: error: Kill job error on job id {id}: {e}")?;
                }
            }
            continue;
        }
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                if args.verbose {
                    writeln!(io.err, "scancel: Terminating job {id}")?;
                }
            }
            Err(e) => {
                failed = true;
                writeln!(io.err, "scancel: error: Kill job error on job id {id}: {e}")?;
            }
        }
    }
    for (ns, name, array_id, drop) in &plan.drop_tasks {
        if signal.is_some() {
            // Tasks not created yet have nothing running to signal.
            failed = true;
            for i in drop {
                writeln!(
                    io.err,
                    "scancel: error: Kill job error on job id {array_id}_{i}: Job can not be altered now, try again later"
                )?;
            }
            continue;
        }
        let api: Api<BatchJob> = Api::namespaced(cluster.client.clone(), ns);
        if let Err(e) = drop_array_tasks(&api, name, drop).await {
            failed = true;
            writeln!(
                io.err,
                "scancel: error: Kill job error on job id {array_id}_[{}]: {e}",
                crate::rows::index_list(drop)
            )?;
        } else if args.verbose {
            for i in drop {
                writeln!(io.err, "scancel: Terminating job {array_id}_{i}")?;
            }
        }
    }
    if !args.quiet {
        for e in &plan.errors {
            writeln!(io.err, "scancel: error: {e}")?;
        }
    }
    if failed || !plan.errors.is_empty() {
        // scancel exits non-zero when any job could not be signalled; the reasons are out.
        return Err(crate::Failed.into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        args: ScancelArgs,
    }

    fn req(argv: &[&str]) -> Result<Option<(String, SignalTarget)>, String> {
        let c =
            Cmd::try_parse_from(std::iter::once("scancel").chain(argv.iter().copied())).unwrap();
        signal_request(&c.args).map(|a| a.map(|a| (a.name, a.target)))
    }

    #[test]
    fn the_signal_and_whom_it_goes_to_are_slurms() {
        assert_eq!(req(&["1"]), Ok(None));
        assert_eq!(
            req(&["-s", "usr1", "1"]),
            Ok(Some(("USR1".into(), SignalTarget::Steps)))
        );
        assert_eq!(
            req(&["--signal=SIGUSR2", "-b", "1"]),
            Ok(Some(("USR2".into(), SignalTarget::Batch)))
        );
        // -f wins over -b, as Slurm's man page says.
        assert_eq!(
            req(&["-s", "15", "-b", "-f", "1"]),
            Ok(Some(("TERM".into(), SignalTarget::Full)))
        );
        // KILL cancels.
        assert_eq!(req(&["-s", "KILL", "1"]), Ok(None));
        assert_eq!(req(&["-s", "9", "-b", "1"]), Ok(None));
        assert_eq!(
            req(&["-s", "FOO", "1"]),
            Err("Unknown job signal: FOO".into())
        );
        assert_eq!(
            req(&["-s", "65", "1"]),
            Err("Unknown job signal: 65".into())
        );
    }

    #[test]
    fn step_ids_are_told_apart_from_job_ids() {
        let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            split_steps(&ids(&["7", "7.1", "8_3.0", "9_[1-2]", ".3", "7.x"])),
            (
                ids(&["7", "9_[1-2]", ".3", "7.x"]),
                vec![("7".into(), 1), ("8_3".into(), 0)]
            )
        );
    }
}
