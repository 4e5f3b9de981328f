//! CEL validation rules shared by the CRDs: each Slurm value syntax once, with a message that
//! says what is allowed. The Rust parsers in [`crate::slurm`] are the full grammar; these rules
//! catch malformed values at `kubectl apply` time, on the API server.
//!
//! Regular expressions avoid backslashes (a literal `.` is `[.]`) so they read the same in
//! Rust, CEL and YAML.

use kube::core::{Reason, Rule};

/// A rule with its message and the `FieldValueInvalid` reason.
pub fn rule(expr: &str, message: &str) -> Rule {
    Rule::new(expr)
        .message(message)
        .reason(Reason::FieldValueInvalid)
}

#[cfg(test)]
const TIME_BODY: &str = "[0-9]+(:[0-9]+){0,2}|[0-9]+-[0-9]+(:[0-9]+){0,2}";

/// `--time`: an int-or-string (an integer is minutes); `string(self)` reads either form.
pub const TIME: &str = "string(self).matches('^((?i:unlimited|infinite)|[0-9]+(:[0-9]+){0,2}|[0-9]+-[0-9]+(:[0-9]+){0,2})$')";
/// Message for [`TIME`].
pub const TIME_MSG: &str = "time must be MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED (e.g. 30, \"4:00:00\" or \"2-00:00:00\")";

/// `--nodes`: N or MIN-MAX, 1 <= MIN <= MAX.
pub const NODES: &str = "string(self).matches('^[0-9]*[1-9][0-9]*(-[0-9]*[1-9][0-9]*)?$') && (!string(self).contains('-') || int(string(self).split('-')[0]) <= int(string(self).split('-')[1]))";

/// Memory sizes: integer with optional K/M/G/T unit and optional B.
pub const MEM: &str = "self.matches('^[0-9]+([KMGTkmgt][Bb]?)?$')";
/// Message for [`MEM`].
pub const MEM_MSG: &str =
    "memory must be an integer with an optional unit K, M, G or T (default M), e.g. 16G or 64000";

/// `--gpus*`: `[TYPE:]COUNT`; 0 asks for none, as Slurm takes `--gpus=0`.
pub const GPUS: &str = "string(self).matches('^([A-Za-z0-9_.-]+:)?[0-9]+$')";
/// Message for [`GPUS`].
pub const GPUS_MSG: &str =
    "GPU counts must be COUNT or TYPE:COUNT (e.g. 8 or \"a100:8\"; 0 asks for none)";

/// `--gres`: only the gpu resource is scheduled.
pub const GRES: &str = "self.matches('^gpu(:[A-Za-z0-9_.-]+)?(:[0-9]+)?$')";

/// A GPU type on its own.
pub const GPU_TYPE: &str = "self.matches('^[A-Za-z0-9_.-]+$')";

/// `--constraint`: the characters of the constraint language (the parser checks the rest).
pub const CONSTRAINT: &str = "self.matches('^[A-Za-z0-9_.:=,&|*()\\\\[\\\\]-]+$') && !self.matches('(^[&|,])|([&|,]$)|([&|,][&|,])')";

/// `--array`: index list and optional throttle.
pub const ARRAY: &str = "string(self).matches('^[0-9]+(-[0-9]+(:[0-9]*[1-9][0-9]*)?)?(,[0-9]+(-[0-9]+(:[0-9]*[1-9][0-9]*)?)?)*(%[0-9]*[1-9][0-9]*)?$')";

/// An array index above 1000 (a number at the start, after `,` or after `-`; steps after `:`
/// and the `%` throttle may be larger).
#[cfg(test)]
const ARRAY_BIG: &str = "(^|[,-])0*(100[1-9]|10[1-9][0-9]|1[1-9][0-9][0-9]|[2-9][0-9][0-9][0-9]|[1-9][0-9][0-9][0-9][0-9]+)($|[^0-9])";

/// `--array` bounds: every index is below Slurm's default MaxArraySize (1001).
pub const ARRAY_MAX: &str = concat!(
    "!string(self).matches('",
    "(^|[,-])0*(100[1-9]|10[1-9][0-9]|1[1-9][0-9][0-9]|[2-9][0-9][0-9][0-9]|[1-9][0-9][0-9][0-9][0-9]+)($|[^0-9])",
    "')"
);
/// Message for [`ARRAY_MAX`].
pub const ARRAY_MAX_MSG: &str =
    "array indices must be at most 1000 (below Slurm's MaxArraySize of 1001)";

/// `--array` ranges go up: `LO-HI` needs `LO <= HI`. Malformed values and indices above 1000
/// are left to [`ARRAY`] and [`ARRAY_MAX`] (one message each).
pub const ARRAY_RANGES: &str = concat!(
    "!string(self).matches('^[0-9]+(-[0-9]+(:[0-9]+)?)?(,[0-9]+(-[0-9]+(:[0-9]+)?)?)*(%[0-9]+)?$') || ",
    "string(self).matches('",
    "(^|[,-])0*(100[1-9]|10[1-9][0-9]|1[1-9][0-9][0-9]|[2-9][0-9][0-9][0-9]|[1-9][0-9][0-9][0-9][0-9]+)($|[^0-9])",
    "') || ",
    "string(self).split('%')[0].split(',').all(p, !p.contains('-') || ",
    "int(p.substring(0, p.indexOf('-'))) <= int(p.split(':')[0].substring(p.indexOf('-') + 1)))"
);
/// Message for [`ARRAY_RANGES`].
pub const ARRAY_RANGES_MSG: &str = "array ranges LO-HI need LO <= HI (e.g. \"0-15\", not \"15-0\")";

/// The job's name labels its task pods (`muster.dev/batchjob`, a label value) and names its
/// headless Service: at most 63 characters.
pub const NAME_FITS: &str = "size(self.metadata.name) <= 63";
/// Message for [`NAME_FITS`].
pub const NAME_FITS_MSG: &str = "metadata.name must be at most 63 characters: it labels the job's task pods (muster.dev/batchjob) and names its Service";

/// An array's elements are BatchJobs named `NAME-INDEX`, which must fit 63 characters too.
pub const ARRAY_NAME_FITS: &str = concat!(
    "!has(self.spec) || !has(self.spec.array) || ",
    "string(self.spec.array).split('%')[0].split(',').all(p, ",
    "size(self.metadata.name) + 1 + size(p.split(':')[0].split('-')[size(p.split(':')[0].split('-')) - 1]) <= 63)"
);
/// Message for [`ARRAY_NAME_FITS`].
pub const ARRAY_NAME_FITS_MSG: &str = "metadata.name is too long for an array job: its elements are named NAME-INDEX, which must be at most 63 characters";

/// Something to run: a non-blank script, or a pod template with at least one container.
pub const SOMETHING_TO_RUN: &str = "(has(self.script) && self.script.matches('[^[:space:]]')) || (has(self.template) && has(self.template.spec) && has(self.template.spec.containers) && size(self.template.spec.containers) > 0)";
/// Message for [`SOMETHING_TO_RUN`].
pub const SOMETHING_TO_RUN_MSG: &str =
    "nothing to run: give a script, or a template whose spec has at least one container";

#[cfg(test)]
const DEP_REF: &str =
    "([0-9]+|[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*)([+][0-9]+)?";

/// `--dependency`: items joined by `,` or by `?`, not both.
pub const DEPENDENCY: &str = concat!(
    "self.matches('^(singleton|[0-9]+|(after|afterany|afterok|afternotok|aftercorr):",
    "([0-9]+|[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*)([+][0-9]+)?(:([0-9]+|[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*)([+][0-9]+)?)*)",
    "((,(singleton|[0-9]+|(after|afterany|afterok|afternotok|aftercorr):",
    "([0-9]+|[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*)([+][0-9]+)?(:([0-9]+|[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*)([+][0-9]+)?)*))*",
    "|([?](singleton|[0-9]+|(after|afterany|afterok|afternotok|aftercorr):",
    "([0-9]+|[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*)([+][0-9]+)?(:([0-9]+|[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*)([+][0-9]+)?)*))*)$')"
);

/// `--switches`: `COUNT[@MAX_WAIT]`.
pub const SWITCHES: &str = "string(self).matches('^[0-9]*[1-9][0-9]*(@([0-9]+(:[0-9]+){0,2}|[0-9]+-[0-9]+(:[0-9]+){0,2}))?$')";

/// `--gpu-bind`.
pub const GPU_BIND: &str = "self.matches('^(verbose,)?(closest|none|map_gpu:[0-9]+([*][0-9]+)?(,[0-9]+([*][0-9]+)?)*|mask_gpu:(0x)?[0-9a-fA-F]+([*][0-9]+)?(,(0x)?[0-9a-fA-F]+([*][0-9]+)?)*|per_task:[0-9]*[1-9][0-9]*|single:[0-9]*[1-9][0-9]*)$')";

/// `--nodelist` / `--exclude`: a Slurm hostlist of Node names (lower-case letters, digits,
/// `-`, `.`, with `[a-b,c]` ranges, items joined by `,` or spaces as in Slurm). The hostlist
/// parser checks the brackets.
pub const HOSTLIST: &str = "self.matches('^[a-z0-9]([-a-z0-9., \\\\[\\\\]]*[a-z0-9\\\\]])?$')";
/// Message for [`HOSTLIST`] on `nodelist`.
pub const NODELIST_MSG: &str = "nodelist must be a Slurm hostlist of Node names, e.g. \"gpu[001-004],gpu010\" (sbatch -w FILE reads a file of names; a BatchJob lists them)";
/// Message for [`HOSTLIST`] on `exclude`.
pub const EXCLUDE_MSG: &str = "exclude must be a Slurm hostlist of Node names, e.g. \"gpu[001-004],gpu010\" (sbatch -x FILE reads a file of names; a BatchJob lists them)";

/// A DNS-1123 subdomain (object names).
pub const DNS_SUBDOMAIN: &str =
    "self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')";

/// A Kubernetes label key: optional DNS prefix and `/`, then a name of at most 63 characters.
pub const LABEL_KEY: &str = "self.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$')";

/// `--account`: a Slurm account name (no spaces, commas or colons; sacct and squeue print it
/// in one column).
pub const ACCOUNT: &str = "self.matches('^[A-Za-z0-9_.@+-]+$')";
/// Message for [`ACCOUNT`].
pub const ACCOUNT_MSG: &str =
    "account must be letters, digits and _ . @ + - (a Slurm account name)";

/// `--signal`: `[{R|B}:]SIG[@TIME]` (the grammar is `slurm::signal`; this is its shape).
pub const SIGNAL: &str = "self.matches('^([RrBb]{1,2}:)?([A-Za-z0-9]+)(@[0-9]{1,5})?$')";
/// Message for [`SIGNAL`].
pub const SIGNAL_MSG: &str =
    "signal must be [{R|B}:]SIGNAL[@SECONDS], e.g. USR1, B:USR1@90 or 10@120";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dependency_rule_is_built_from_its_parts() {
        assert!(ARRAY_MAX.contains(ARRAY_BIG));
        assert!(ARRAY_RANGES.contains(ARRAY_BIG));
        // DEPENDENCY is spelled out (concat! needs literals); keep it in step with DEP_REF.
        assert_eq!(DEPENDENCY.matches(DEP_REF).count(), 6);
        assert!(TIME.contains(TIME_BODY));
        assert!(SWITCHES.contains(TIME_BODY));
    }
}
