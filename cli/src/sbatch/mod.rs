//! `sbatch`: read a batch script's `#SBATCH` lines and the command line the way Slurm does,
//! and submit the BatchJob they describe.
//!
//! The pure part ([`prepare`]) turns arguments, script text and environment into the
//! BatchJob; [`run`] reads the script, then prints the manifest (`--dry-run`) or creates the
//! object and waits for the operator to give it a job id.

pub mod manifest;
pub mod options;
pub mod outfiles;
pub mod parse;
pub mod test_only;
pub mod values;

use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use muster_crds::v1alpha1::{BatchJob, Partition};

use crate::Io;
use crate::cluster::Target;
use manifest::{JobSource, Submitter};
use muster_crds::slurm::script;
use options::SbatchOptions;
use parse::{Merged, SbatchError, SbatchErrors};

/// `muster sbatch [OPTIONS] [SCRIPT [ARGS...]]`
#[derive(Args, Clone, Debug, Default, PartialEq, Eq)]
#[command(
    infer_long_args = true,
    args_override_self = true,
    about = "Submit a batch script (Slurm's sbatch)",
    long_about = "Submit a batch script as a BatchJob. #SBATCH lines are read as real sbatch \
                  reads them (up to the first command); options on the command line override \
                  SBATCH_* environment variables, which override the script. Without SCRIPT the \
                  script is read from standard input."
)]
pub struct SbatchArgs {
    /// Options shared with #SBATCH lines.
    #[command(flatten)]
    pub options: SbatchOptions,

    /// Print the BatchJob instead of creating it: yaml (default) or json. As with kubectl,
    /// `--dry-run -o yaml` / `-o json` also selects the format.
    #[arg(long = "dry-run", value_name = "FORMAT", num_args = 0..=1, require_equals = true,
          default_missing_value = "yaml", value_parser = ["yaml", "json", "client"])]
    pub dry_run: Option<String>,

    /// Seconds to wait for the operator to assign the job id after creating the BatchJob.
    #[arg(
        long = "submit-timeout",
        value_name = "SECONDS",
        default_value_t = 30,
        env = "MUSTER_SUBMIT_TIMEOUT"
    )]
    pub submit_timeout: u64,

    /// The batch script and its arguments (the arguments go to the task container).
    #[arg(value_name = "SCRIPT [ARGS]", trailing_var_arg = true, num_args = 0..)]
    pub command: Vec<String>,
}

/// Manifest formats for `--dry-run`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ManifestFormat {
    /// YAML, as `kubectl create --dry-run=client -o yaml` prints.
    Yaml,
    /// JSON.
    Json,
}

/// A submission ready to print or create.
#[derive(Clone, Debug)]
pub struct Prepared {
    /// The BatchJob to create.
    pub job: BatchJob,
    /// The options as merged from every source.
    pub merged: Merged,
    /// Notes for standard error.
    pub warnings: Vec<String>,
    /// `Some` for a dry run.
    pub dry_run: Option<ManifestFormat>,
}

/// Where the script text comes from, already read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptInput {
    /// The name used in messages (the path as given, or `(stdin)`).
    pub name: String,
    /// Slurm's default job name for it.
    pub default_job_name: String,
    /// The text.
    pub text: String,
}

impl SbatchArgs {
    /// The dry-run format, and the command-line options with kubectl's `-o yaml|json` taken
    /// out of `--output` when it means the manifest format.
    fn dry_run_format(&self) -> (Option<ManifestFormat>, SbatchOptions) {
        let mut options = self.options.clone();
        let Some(dry) = &self.dry_run else {
            return (None, options);
        };
        let mut format = match dry.as_str() {
            "json" => ManifestFormat::Json,
            _ => ManifestFormat::Yaml,
        };
        match options.output.as_deref() {
            Some("yaml") => {
                format = ManifestFormat::Yaml;
                options.output = None;
            }
            Some("json") => {
                format = ManifestFormat::Json;
                options.output = None;
            }
            _ => {}
        }
        (Some(format), options)
    }
}

/// The file name part of a path (Slurm's default job name for a script).
fn base_name(path: &str) -> String {
    std::path::Path::new(path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.to_string())
}

/// Turn arguments, the script and the environment into the BatchJob, or say precisely why not:
/// every problem of the submission at once (script lines in order), with the warnings met.
/// `script` is `None` with `--wrap`.
pub fn prepare(
    args: &SbatchArgs,
    script: Option<ScriptInput>,
    env: &dyn Fn(&str) -> Option<String>,
    who: &Submitter,
) -> Result<Prepared, SbatchErrors> {
    let (dry_run, cli_options) = args.dry_run_format();
    let script_args: Vec<String> = args.command.iter().skip(1).cloned().collect();
    let mut warnings = Vec::new();
    let mut errors: Vec<SbatchError> = Vec::new();
    let refuse =
        |errors: Vec<SbatchError>, warnings: Vec<String>| SbatchErrors { errors, warnings };
    let cli = parse::command_line_layer(cli_options, &mut warnings);

    let (source, directives) = match (&cli.options.wrap, script) {
        (Some(_), _) if !args.command.is_empty() => {
            return Err(refuse(
                vec![SbatchError::general(
                    "a script argument is not permitted with --wrap: give one or the other",
                )],
                warnings,
            ));
        }
        (Some(wrap), _) => {
            let text = manifest::wrap_script(wrap);
            (
                JobSource {
                    script: text,
                    default_name: "wrap".into(),
                    args: Vec::new(),
                },
                parse::Layer::default(),
            )
        }
        (None, None) => {
            return Err(refuse(
                vec![SbatchError::general(
                    "no batch script: give SCRIPT, --wrap=COMMAND, or a script on standard input",
                )],
                warnings,
            ));
        }
        (None, Some(input)) => {
            let read = script::read(&input.text).map_err(|e| {
                refuse(
                    vec![SbatchError::general(format!("{}: {e}", input.name))],
                    warnings.clone(),
                )
            })?;
            let at = |line: usize| parse::Origin::Line {
                file: input.name.clone(),
                line,
            };
            warnings.extend(
                read.warnings
                    .iter()
                    .map(|w| format!("{}: {}", at(w.line), w.message)),
            );
            let mut found: Vec<SbatchError> = read
                .problems
                .into_iter()
                .map(|p| {
                    let mut e = SbatchError::at(at(p.line), p.message);
                    e.hint = p.hint;
                    e
                })
                .collect();
            let layer =
                parse::parse_directives(&input.name, &read.directives, &mut warnings, &mut found);
            // Both lists are in line order: keep the script's order overall.
            found.sort_by_key(|e| match &e.at {
                Some(parse::Origin::Line { line, .. }) => *line,
                _ => 0,
            });
            errors.extend(found);
            (
                JobSource {
                    script: input.text,
                    default_name: input.default_job_name,
                    args: script_args,
                },
                layer,
            )
        }
    };

    let env_layer = parse::parse_env(env, &mut warnings, &mut errors);
    let mut merged = parse::merge(cli, env_layer, directives);
    pyxis_environment(&mut merged, env, &mut errors);
    errors.extend(manifest::check(&merged));
    if !errors.is_empty() {
        // Script lines in order, then the environment's and the command line's problems.
        errors.sort_by_key(|e| match &e.at {
            Some(parse::Origin::Line { line, .. }) => (0, *line),
            Some(parse::Origin::Env(_)) => (1, 0),
            Some(parse::Origin::CommandLine) => (2, 0),
            None => (3, 0),
        });
        return Err(refuse(errors, warnings));
    }
    // -w FILE / -x FILE: sbatch reads the node names from the file.
    for opt in ["nodelist", "exclude"] {
        let value = match opt {
            "nodelist" => &mut merged.options.nodelist,
            _ => &mut merged.options.exclude,
        };
        if let Some(v) = value.as_deref().filter(|v| v.contains('/')) {
            match read_node_file(v, who.cwd.as_deref()) {
                Ok(read) => *value = Some(read),
                Err(m) => errors.push(SbatchError::at(
                    merged
                        .origins
                        .get(opt)
                        .cloned()
                        .unwrap_or(parse::Origin::CommandLine),
                    m,
                )),
            }
        }
    }
    if let Err(e) = nodelist_counts(&mut merged, &mut warnings) {
        errors.push(e);
    }
    if !errors.is_empty() {
        return Err(refuse(errors, warnings));
    }
    // Slurm lowers the node count to the task count when fewer tasks than nodes are asked for.
    let o = &mut merged.options;
    if let (Some(n), Some(nodes)) = (o.ntasks, o.nodes.clone())
        && let Ok(range) = muster_crds::slurm::NodeRange::parse(&nodes)
        && n < range.min
    {
        warnings.push(format!(
            "can't run {n} processes on {} nodes, setting nnodes to {n}",
            range.min
        ));
        o.nodes = Some(n.to_string());
    }
    if let Some(p) = &merged.options.partition {
        let object = manifest::partition_object_name(p);
        if &object != p {
            warnings.push(format!(
                "partition '{p}' is the Partition object '{object}' (Kubernetes names have no \
                 upper case or '_')"
            ));
        }
    }
    let mut job = manifest::build(&merged, &source, who);
    manifest::add_container_env(&mut job, &merged.options.container_env, env);
    if let Some(n) = &merged.options.container_name {
        warnings.push(format!(
            "--container-name={n}: every step of the job runs in its node pods' containers already; none is kept after the job ends"
        ));
    }
    Ok(Prepared {
        job,
        merged,
        warnings,
        dry_run,
    })
}

/// pyxis's `PYXIS_CONTAINER_*` variables: each gives its option when no option did (pyxis's
/// precedence: the command line and directives over the environment).
fn pyxis_environment(
    merged: &mut Merged,
    env: &dyn Fn(&str) -> Option<String>,
    errors: &mut Vec<SbatchError>,
) {
    const VARS: &[(&str, &str)] = &[
        ("PYXIS_CONTAINER_IMAGE", "container-image"),
        ("PYXIS_CONTAINER_MOUNTS", "container-mounts"),
        ("PYXIS_CONTAINER_WORKDIR", "container-workdir"),
        ("PYXIS_CONTAINER_NAME", "container-name"),
        ("PYXIS_CONTAINER_ENV", "container-env"),
        ("PYXIS_CONTAINER_UNSHARE", "container-unshare"),
    ];
    for (var, long) in VARS {
        if merged.origins.contains_key(*long) {
            continue;
        }
        let Some(value) = env(var) else { continue };
        let at = parse::Origin::Env((*var).to_string());
        match options::apply(&mut merged.options, long, Some(&value)) {
            Ok(_) => {
                merged.origins.insert((*long).to_string(), at);
            }
            Err(why) => errors.push(SbatchError::at(
                at,
                format!("invalid value '{value}' for --{long}: {why}"),
            )),
        }
    }
}

/// The node names of a `-w FILE` / `-x FILE` file (relative to `cwd`), as sbatch reads them:
/// `#` starts a comment, blank lines are skipped; the names as one hostlist.
pub fn read_node_file(path: &str, cwd: Option<&std::path::Path>) -> Result<String, String> {
    let full = match cwd {
        Some(d) => d.join(path),
        None => std::path::PathBuf::from(path),
    };
    let text = std::fs::read_to_string(&full)
        .map_err(|e| format!("unable to open node file {path}: {e}"))?;
    let mut names = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let got = muster_crds::slurm::hostlist::expand(line)
            .map_err(|e| format!("node file {path}, line {}: {e}", i + 1))?;
        names.extend(got);
    }
    if names.is_empty() {
        return Err(format!("node file {path} names no node"));
    }
    Ok(muster_crds::slurm::hostlist::compress(names))
}

/// What `--nodelist` does to the node count, as sbatch does it: the count rises to the named
/// nodes (`-w gpu[001-003] -N 2-5` is `-N 3-5`; a maximum below them is an error), and with
/// fewer tasks than named nodes only the first nodes (sorted) are kept, with a warning.
fn nodelist_counts(merged: &mut Merged, warnings: &mut Vec<String>) -> Result<(), SbatchError> {
    use muster_crds::slurm::{NodeRange, hostlist};
    let o = &mut merged.options;
    let Some(w) = o.nodelist.clone() else {
        return Ok(());
    };
    let Ok(all) = hostlist::expand(&w) else {
        return Ok(());
    };
    let mut names: Vec<String> = Vec::with_capacity(all.len());
    for n in all {
        if !names.contains(&n) {
            names.push(n);
        }
    }
    let k = names.len() as u32;
    if let Some(range) = o.nodes.as_deref().and_then(|n| NodeRange::parse(n).ok()) {
        if range.max < k {
            return Err(SbatchError::at(
                merged.origin("nodelist"),
                format!(
                    "invalid number of nodes (-N {k}-{}): --nodelist names {k} nodes",
                    range.max
                ),
            ));
        }
        if range.min < k {
            o.nodes = Some(NodeRange { min: k, ..range }.to_string());
        }
    }
    if let Some(n) = o.ntasks
        && n < k
    {
        if o.nodes.is_none() {
            warnings.push(format!(
                "can't run {n} processes on {k} nodes, setting nnodes to {n}"
            ));
        }
        names.sort_by(|a, b| muster_operator::core::util::natural_cmp(a, b));
        names.truncate(n as usize);
        o.nodelist = Some(hostlist::compress(&names));
    }
    Ok(())
}

/// `sbatch -v`: the parsed options as real sbatch prints them (paths against `cwd`).
pub fn defined_options_text(merged: &Merged, cwd: &std::path::Path) -> String {
    let mut out = String::from(
        "sbatch: defined options\nsbatch: -------------------- --------------------\n",
    );
    let mut opts = parse::slurm_defined_options(&merged.options, cwd);
    if merged.options.verbose > 0 {
        opts.insert("verbose".into(), merged.options.verbose.to_string());
    }
    for (k, v) in opts {
        out.push_str(&format!("sbatch: {k:<20}: {v}\n"));
    }
    out.push_str(
        "sbatch: -------------------- --------------------\nsbatch: end of defined options\n",
    );
    out
}

/// Print a refused submission as sbatch prints its problems: the warnings, then one
/// `sbatch: error: ` line per problem (hints on their own `hint:` lines).
pub fn print_refusal(refused: &SbatchErrors, err: &mut dyn std::io::Write) -> std::io::Result<()> {
    for w in &refused.warnings {
        writeln!(err, "sbatch: warning: {w}")?;
    }
    for e in &refused.errors {
        writeln!(err, "sbatch: error: {e}")?;
    }
    Ok(())
}

/// Render a BatchJob manifest. The YAML quotes every string a YAML 1.1 reader would take for
/// something else (`time: "00:10:00"`), see [`crate::yaml`].
pub fn render_manifest(job: &BatchJob, format: ManifestFormat) -> anyhow::Result<String> {
    Ok(match format {
        ManifestFormat::Yaml => crate::yaml::to_string(job)?,
        ManifestFormat::Json => serde_json::to_string_pretty(job)? + "\n",
    })
}

fn read_script(args: &SbatchArgs, io: &mut Io<'_>) -> anyhow::Result<Option<ScriptInput>> {
    if args.options.wrap.is_some() {
        return Ok(None);
    }
    match args.command.first() {
        Some(path) => {
            let full = io.cwd.join(path);
            let bytes = std::fs::read(&full)
                .with_context(|| format!("unable to open batch script {path}"))?;
            let text = String::from_utf8(bytes)
                .map_err(|_| anyhow::anyhow!("batch script {path} is not UTF-8 text"))?;
            Ok(Some(ScriptInput {
                name: path.clone(),
                default_job_name: base_name(path),
                text,
            }))
        }
        None => {
            let mut text = String::new();
            io.stdin
                .read_to_string(&mut text)
                .context("cannot read the batch script from standard input")?;
            Ok(Some(ScriptInput {
                name: "(stdin)".into(),
                default_job_name: "sbatch".into(),
                text,
            }))
        }
    }
}

/// Run `muster sbatch`.
pub async fn run(args: &SbatchArgs, target: &Target<'_>, io: &mut Io<'_>) -> anyhow::Result<()> {
    let script = read_script(args, io)?;
    let identity = target.identity();
    let env = io.env;
    let who = Submitter {
        namespace: identity.explicit_namespace.clone(),
        cwd: Some(io.cwd.clone()),
    };
    let prepared = match prepare(args, script, env, &who) {
        Ok(p) => p,
        Err(refused) => {
            print_refusal(&refused, io.err)?;
            return Err(crate::Failed.into());
        }
    };
    for w in &prepared.warnings {
        writeln!(io.err, "sbatch: warning: {w}")?;
    }
    if prepared.merged.options.verbose > 0 {
        write!(
            io.err,
            "{}",
            defined_options_text(&prepared.merged, &io.cwd)
        )?;
    }
    if let Some(format) = prepared.dry_run {
        write!(io.out, "{}", render_manifest(&prepared.job, format)?)?;
        return Ok(());
    }

    let cluster = target.cluster(env).await?;
    let mut job = prepared.job;
    job.metadata.namespace = Some(cluster.namespace.clone());
    check_partition(&cluster.client, &prepared.merged).await?;
    if let Ok(parts) = Api::<Partition>::all(cluster.client.clone())
        .list(&Default::default())
        .await
    {
        let warn_job = {
            let mut j = job.clone();
            j.spec.partition = j
                .spec
                .partition
                .clone()
                .map(|p| manifest::partition_object_name(&p));
            j
        };
        for w in outfiles::warnings(&warn_job, outfiles::partition_of(&warn_job, &parts.items)) {
            writeln!(io.err, "sbatch: warning: {w}")?;
        }
    }
    if prepared.merged.options.test_only {
        return print_test_only(&cluster, &job, io).await;
    }
    check_runnable(&cluster, &job).await?;
    check_dependencies(&cluster, &prepared.merged).await?;
    let (name, id) = submit(
        &cluster.client,
        &cluster.namespace,
        &job,
        Duration::from_secs(args.submit_timeout),
    )
    .await?;
    tracing::debug!(name, id, "submitted");
    let o = &prepared.merged.options;
    if o.parsable {
        writeln!(io.out, "{id}")?;
    } else if !o.quiet {
        writeln!(io.out, "Submitted batch job {id}")?;
    }
    if o.wait {
        io.out.flush()?;
        let code = wait_for_end(&cluster.client, &cluster.namespace, &name).await?;
        if code != 0 {
            return Err(crate::ExitWith(code).into());
        }
    }
    Ok(())
}

/// `--test-only`: the scheduling core's estimate on the cluster as it is, on standard error
/// as Slurm prints it; nothing is created.
async fn print_test_only(
    cluster: &crate::cluster::Cluster,
    job: &BatchJob,
    io: &mut Io<'_>,
) -> anyhow::Result<()> {
    let partitions = crate::fetch::partitions(cluster).await?;
    let nodes = crate::fetch::nodes(cluster).await?;
    let gpunodes = crate::fetch::gpunodes(cluster).await;
    let jobs = crate::fetch::batchjobs_all_or_own(cluster).await?;
    // The operator's namespace: the chart's default unless told (`MUSTER_OPERATOR_NAMESPACE`).
    let operator_ns =
        (io.env)("MUSTER_OPERATOR_NAMESPACE").unwrap_or_else(|| "muster-system".to_string());
    let usage = crate::fetch::fair_share_usage(cluster, &operator_ns).await;
    let volume_claims = crate::fetch::volume_claims(cluster).await;
    let world = test_only::World {
        partitions: &partitions,
        nodes: &nodes,
        gpunodes: &gpunodes,
        jobs: &jobs,
        usage: usage.as_ref(),
        volume_claims: &volume_claims,
    };
    // The submitter, as the admission webhook would record it (`--exclusive=user` needs it).
    let mut job = job.clone();
    job.annotations_mut()
        .insert(muster_crds::labels::USER.to_string(), cluster.user.clone());
    let now = jiff::Timestamp::now().as_second();
    let estimate = test_only::estimate(&job, world, now)?;
    writeln!(
        io.err,
        "sbatch: {}",
        test_only::message(&estimate, &jiff::tz::TimeZone::system())
    )?;
    Ok(())
}

/// The exit status `sbatch --wait` ends with: the job's exit code when it has one, else 0 for
/// COMPLETED and 1 for any other end (cancelled, timed out, node failure, …).
pub fn wait_exit_code(status: &muster_crds::v1alpha1::BatchJobStatus) -> u8 {
    use muster_crds::v1alpha1::JobState;
    match status.exit_code {
        Some(c) if c != 0 => u8::try_from(c).unwrap_or(1),
        _ if status.state == Some(JobState::Completed) => 0,
        _ => 1,
    }
}

/// Poll the job until it ends (`--wait`); its [`wait_exit_code`].
async fn wait_for_end(client: &kube::Client, namespace: &str, name: &str) -> anyhow::Result<u8> {
    let api: Api<BatchJob> = Api::namespaced(client.clone(), namespace);
    let mut delay = Duration::from_millis(200);
    loop {
        let job = api
            .get_opt(name)
            .await
            .with_context(|| format!("waiting for BatchJob {namespace}/{name}"))?
            .with_context(|| format!("BatchJob {namespace}/{name} was deleted before it ended"))?;
        if let Some(st) = &job.status
            && st.state.is_some_and(|s| s.is_terminal())
        {
            return Ok(wait_exit_code(st));
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(2));
    }
}

/// Refuse what can never run before creating anything, as sbatch does ("Requested node
/// configuration is not available"), with the check admission makes
/// ([`muster_operator::controller::validate::submission`]). Skipped when the cluster's nodes
/// may not be read: admission then judges.
async fn check_runnable(cluster: &crate::cluster::Cluster, job: &BatchJob) -> anyhow::Result<()> {
    let world = match test_only::read_world(cluster).await {
        Ok(w) => w,
        Err(e) => {
            tracing::debug!(error = %e, "cannot read the cluster; admission will judge the job");
            return Ok(());
        }
    };
    world
        .submission(job, &cluster.namespace)
        .map(drop)
        .map_err(|r| SbatchError::general(submission_failed(&r)).into())
}

/// sbatch's message for a refused submission, with the detail Slurm leaves out.
pub fn submission_failed(r: &muster_operator::controller::validate::Refusal) -> String {
    format!("Batch job submission failed: {} ({})", r.slurm, r.detail)
}

/// Refuse an unknown partition before creating anything, as sbatch does.
async fn check_partition(client: &kube::Client, merged: &Merged) -> anyhow::Result<()> {
    let Some(p) = &merged.options.partition else {
        return Ok(());
    };
    let name = manifest::partition_object_name(p);
    let api: Api<Partition> = Api::all(client.clone());
    match api.get_opt(&name).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => {
            let known: Vec<String> = api
                .list(&Default::default())
                .await
                .map(|l| {
                    l.items
                        .into_iter()
                        .filter_map(|p| p.metadata.name)
                        .collect()
                })
                .unwrap_or_default();
            let mut err = SbatchError::at(
                merged.origin("partition"),
                format!("invalid partition specified: {p}"),
            );
            if !known.is_empty() {
                err = err.hint(format!("partitions in this cluster: {}", known.join(", ")));
            }
            Err(err.into())
        }
        // Not allowed to read partitions (or the API is missing): let the operator judge.
        Err(e) => {
            tracing::debug!(error = %e, "cannot check the partition");
            Ok(())
        }
    }
}

/// The jobs a dependency names that do not exist: `(reference, why)`. Ids are looked up in
/// `jobs` of this namespace and `elsewhere` (other namespaces, when readable); names in this
/// namespace only, as the API defines them.
pub fn missing_dependencies(spec: &str, jobs: &[BatchJob], elsewhere: &[BatchJob]) -> Vec<String> {
    use muster_crds::slurm::{DependencySpec, JobTarget};
    let Ok(dep) = DependencySpec::parse(spec) else {
        return Vec::new();
    };
    let has_id = |list: &[BatchJob], id: u64| {
        list.iter().any(|j| {
            j.status
                .as_ref()
                .is_some_and(|s| s.job_id == Some(id) || s.array_job_id == Some(id))
        })
    };
    let mut missing = Vec::new();
    for r in dep.jobs() {
        match &r.target {
            JobTarget::Id(id) if !has_id(jobs, *id) && !has_id(elsewhere, *id) => {
                missing.push(format!("job {id} does not exist"));
            }
            JobTarget::Name(n)
                if !jobs
                    .iter()
                    .any(|j| j.metadata.name.as_deref() == Some(n.as_str())) =>
            {
                missing.push(format!("no BatchJob named {n} in this namespace"));
            }
            _ => {}
        }
    }
    missing
}

/// Refuse a dependency on a job that does not exist, as sbatch does ("Job dependency
/// problem"), before creating anything.
async fn check_dependencies(
    cluster: &crate::cluster::Cluster,
    merged: &Merged,
) -> anyhow::Result<()> {
    let Some(spec) = &merged.options.dependency else {
        return Ok(());
    };
    let here = crate::fetch::batchjobs(cluster, false).await?;
    let mut missing = missing_dependencies(spec, &here, &[]);
    if missing.iter().any(|m| m.starts_with("job ")) {
        // Ids are cluster-wide: look in every namespace we may read.
        if let Ok(all) = crate::fetch::batchjobs(cluster, true).await {
            missing = missing_dependencies(spec, &here, &all);
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(SbatchError::at(
        merged.origin("dependency"),
        format!("Job dependency problem: {}", missing.join("; ")),
    )
    .hint("name a job by its id (sbatch --parsable prints it) or its BatchJob name")
    .into())
}

/// Create the BatchJob and wait (bounded) for the operator to assign its job id.
pub async fn submit(
    client: &kube::Client,
    namespace: &str,
    job: &BatchJob,
    timeout: Duration,
) -> anyhow::Result<(String, u64)> {
    let api: Api<BatchJob> = Api::namespaced(client.clone(), namespace);
    let created = match api.create(&PostParams::default(), job).await {
        Ok(c) => c,
        // Refused by admission: its reason, as sbatch prints slurmctld's.
        Err(kube::Error::Api(e)) if e.message.contains(" denied the request: ") => {
            let why = e
                .message
                .split_once(" denied the request: ")
                .map(|(_, w)| w.to_string())
                .unwrap_or(e.message);
            // "Slurm's error: detail", as check_runnable prints it.
            let why = match why.split_once(": ") {
                Some((slurm, detail)) => format!("{slurm} ({detail})"),
                None => why,
            };
            return Err(SbatchError::general(format!("Batch job submission failed: {why}")).into());
        }
        Err(e) => return Err(anyhow::Error::new(e).context("Batch job submission failed")),
    };
    let name = created
        .metadata
        .name
        .clone()
        .context("the API server returned the BatchJob without a name")?;
    if let Some(id) = created.status.as_ref().and_then(|s| s.job_id) {
        return Ok((name, id));
    }
    let deadline = tokio::time::Instant::now() + timeout;
    let mut delay = Duration::from_millis(100);
    loop {
        tokio::time::sleep(delay).await;
        if let Some(job) = api.get_opt(&name).await? {
            if let Some(id) = job.status.as_ref().and_then(|s| s.job_id) {
                return Ok((name, id));
            }
        } else {
            anyhow::bail!("BatchJob {namespace}/{name} was deleted before it got a job id");
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!(
                "BatchJob {namespace}/{name} was created but no job id was assigned within {}s: \
                 is the Muster operator running? (kubectl get batchjob {name} -n {namespace})",
                timeout.as_secs()
            );
        }
        delay = (delay * 2).min(Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use muster_crds::v1alpha1::{BatchJobStatus, JobState};

    #[test]
    fn wait_exits_with_the_jobs_code() {
        let st = |state, exit_code| BatchJobStatus {
            state: Some(state),
            exit_code,
            ..BatchJobStatus::default()
        };
        assert_eq!(wait_exit_code(&st(JobState::Completed, Some(0))), 0);
        assert_eq!(wait_exit_code(&st(JobState::Failed, Some(3))), 3);
        assert_eq!(wait_exit_code(&st(JobState::Failed, Some(0))), 1);
        assert_eq!(wait_exit_code(&st(JobState::Cancelled, None)), 1);
        assert_eq!(wait_exit_code(&st(JobState::Timeout, Some(300))), 1);
    }
}
