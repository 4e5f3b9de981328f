//! Reaching a cluster: the usual kubeconfig, `--context` and `--namespace` flags, and the
//! identity recorded as the Slurm user.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// Flags every command takes to pick the cluster and namespace.
#[derive(Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterArgs {
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then the
    /// in-cluster service account).
    #[arg(long, global = true, value_name = "FILE", help_heading = "Cluster")]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig context to use (default: the current context).
    #[arg(long, global = true, value_name = "NAME", help_heading = "Cluster")]
    pub context: Option<String>,

    /// Namespace of the jobs (default: the context's namespace). Before the command name it
    /// can also be given as `-n`: `muster -n team-a squeue`.
    #[arg(
        long,
        global = true,
        value_name = "NAMESPACE",
        help_heading = "Cluster"
    )]
    pub namespace: Option<String>,

    /// Short form of --namespace, accepted before the command name only (after it, `-n`
    /// keeps its Slurm meaning).
    #[arg(short = 'n', value_name = "NAMESPACE", help_heading = "Cluster")]
    pub namespace_short: Option<String>,
}

/// A connected cluster: the client, the namespace commands work in, and who we are.
#[derive(Clone)]
pub struct Cluster {
    /// The Kubernetes client.
    pub client: Client,
    /// The namespace for namespaced objects (BatchJobs, pods).
    pub namespace: String,
    /// Who the API server says we are (`kubectl auth whoami`): the user admission records on
    /// submitted jobs, matched by `--me`, `sacct` without `-a` and `scancel -u`-less filters.
    pub user: String,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("namespace", &self.namespace)
            .field("user", &self.user)
            .finish()
    }
}

/// What is known without contacting the cluster (enough for `sbatch --dry-run`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    /// The namespace given with `--namespace`/`-n`, if any.
    pub explicit_namespace: Option<String>,
    /// The kubeconfig context's namespace, if a kubeconfig was readable.
    pub context_namespace: Option<String>,
    /// The kubeconfig context's user (AuthInfo) name.
    pub context_user: Option<String>,
}

impl ClusterArgs {
    /// The namespace given on the command line, if any.
    pub fn namespace(&self) -> Option<String> {
        self.namespace
            .clone()
            .or_else(|| self.namespace_short.clone())
    }

    fn read_kubeconfig(&self) -> Result<Option<Kubeconfig>, kube::config::KubeconfigError> {
        match &self.kubeconfig {
            Some(path) => Kubeconfig::read_from(path).map(Some),
            None => match Kubeconfig::read() {
                Ok(kc) => Ok(Some(kc)),
                // No kubeconfig at all: in-cluster configuration may still work.
                Err(kube::config::KubeconfigError::FindPath) => Ok(None),
                Err(kube::config::KubeconfigError::ReadConfig(e, _))
                    if e.kind() == std::io::ErrorKind::NotFound =>
                {
                    Ok(None)
                }
                Err(e) => Err(e),
            },
        }
    }

    /// Read what the kubeconfig says about namespace and user, without connecting.
    pub fn identity(&self) -> Identity {
        let kc = self.read_kubeconfig().ok().flatten();
        let ctx_name = self
            .context
            .clone()
            .or_else(|| kc.as_ref().and_then(|k| k.current_context.clone()));
        let ctx = kc.as_ref().and_then(|k| {
            k.contexts
                .iter()
                .find(|c| Some(&c.name) == ctx_name.as_ref())
                .and_then(|c| c.context.clone())
        });
        Identity {
            explicit_namespace: self.namespace(),
            context_namespace: ctx.as_ref().and_then(|c| c.namespace.clone()),
            context_user: ctx.and_then(|c| c.user),
        }
    }

    /// Connect to the cluster.
    pub async fn connect(&self, env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<Cluster> {
        let config = match self.read_kubeconfig()? {
            Some(kc) => {
                let opts = KubeConfigOptions {
                    context: self.context.clone(),
                    cluster: None,
                    user: None,
                };
                Config::from_custom_kubeconfig(kc, &opts)
                    .await
                    .context("cannot use the kubeconfig")?
            }
            None => Config::incluster().context(
                "no kubeconfig found (give --kubeconfig or set KUBECONFIG) and not running in a pod",
            )?,
        };
        let namespace = self
            .namespace()
            .unwrap_or_else(|| config.default_namespace.clone());
        let client = Client::try_from(config).context("cannot build a Kubernetes client")?;
        let user = match whoami(&client).await {
            Some(u) => u,
            None => user_name(env, &self.identity()),
        };
        Ok(Cluster {
            client,
            namespace,
            user,
        })
    }
}

/// Where commands run: the cluster the flags name, or a cluster already connected (tests and
/// embedders, e.g. the end-to-end suites against the test control plane).
#[derive(Clone, Debug)]
pub struct Target<'a> {
    /// The command-line flags.
    pub args: &'a ClusterArgs,
    /// A connected cluster to use instead of the flags.
    pub fixed: Option<Cluster>,
}

impl Target<'_> {
    /// The cluster to work on.
    pub async fn cluster(&self, env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<Cluster> {
        match &self.fixed {
            Some(c) => Ok(c.clone()),
            None => self.args.connect(env).await,
        }
    }

    /// What is known without connecting (namespace and user for `sbatch --dry-run`).
    pub fn identity(&self) -> Identity {
        let mut id = self.args.identity();
        if let Some(c) = &self.fixed {
            id.explicit_namespace = Some(c.namespace.clone());
            id.context_user = Some(c.user.clone());
        }
        id
    }
}

/// Who the API server says the client is (`SelfSubjectReview`, what `kubectl auth whoami`
/// asks): the name admission records as a job's submitter. `None` when the server cannot
/// say (Kubernetes before 1.28).
pub async fn whoami(client: &Client) -> Option<String> {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let api: kube::Api<SelfSubjectReview> = kube::Api::all(client.clone());
    match api
        .create(&Default::default(), &SelfSubjectReview::default())
        .await
    {
        Ok(r) => r.status?.user_info?.username,
        Err(e) => {
            tracing::debug!(error = %e, "cannot ask the API server who we are");
            None
        }
    }
}

/// The `-n` trap: after the command name, `-n` keeps Slurm's meaning (a job name for squeue
/// and scancel, a node list for sinfo), unlike kubectl's namespace. When `value` found no
/// `what` but names a namespace, one line for standard error says so; `None` otherwise (or
/// when namespaces may not be read).
pub async fn dash_n_hint(
    cluster: &Cluster,
    command: &str,
    what: &str,
    value: &str,
) -> Option<String> {
    use k8s_openapi::api::core::v1::Namespace;
    let api: kube::Api<Namespace> = kube::Api::all(cluster.client.clone());
    match api.get_opt(value).await {
        Ok(Some(_)) => Some(format!(
            "{command}: hint: -n {value} after the command name is Slurm's {what} (none is named {value}); for namespace {value} use `kubectl muster -n {value} {command}` or --namespace={value}"
        )),
        _ => None,
    }
}

/// Who runs the command when the API server cannot say ([`whoami`]): `$USER`, else the
/// kubeconfig context's user name, else `unknown`.
pub fn user_name(env: &dyn Fn(&str) -> Option<String>, id: &Identity) -> String {
    env("USER")
        .filter(|u| !u.is_empty())
        .or_else(|| id.context_user.clone().filter(|u| !u.is_empty()))
        .unwrap_or_else(|| "unknown".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_prefers_the_login_name() {
        let id = Identity {
            context_user: Some("kubernetes-admin".into()),
            ..Identity::default()
        };
        assert_eq!(user_name(&|_| Some("alice".into()), &id), "alice");
        assert_eq!(user_name(&|_| None, &id), "kubernetes-admin");
        assert_eq!(
            user_name(&|_| Some(String::new()), &Identity::default()),
            "unknown"
        );
    }

    #[test]
    fn reads_namespace_and_user_from_the_kubeconfig() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\ncurrent-context: a\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\ncontexts:\n- name: a\n  context:\n    cluster: c\n    user: bob\n    namespace: team-a\n- name: b\n  context:\n    cluster: c\n    user: carol\nusers:\n- name: bob\n  user: {}\n- name: carol\n  user: {}\n",
        )
        .unwrap();
        let args = ClusterArgs {
            kubeconfig: Some(path.clone()),
            ..ClusterArgs::default()
        };
        let id = args.identity();
        assert_eq!(id.context_namespace.as_deref(), Some("team-a"));
        assert_eq!(id.context_user.as_deref(), Some("bob"));
        let args = ClusterArgs {
            kubeconfig: Some(path),
            context: Some("b".into()),
            namespace_short: Some("x".into()),
            ..ClusterArgs::default()
        };
        let id = args.identity();
        assert_eq!(id.context_namespace, None);
        assert_eq!(id.context_user.as_deref(), Some("carol"));
        assert_eq!(id.explicit_namespace.as_deref(), Some("x"));
    }
}
