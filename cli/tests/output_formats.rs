//! squeue, sinfo, scontrol and sacct text for a fixed cluster, pinned character for character.

mod common;

use common::fixtures;
use jiff::tz::TimeZone;
use muster_cli::rows::{cluster_rows, job_rows};

fn cli(argv: &[&str]) -> muster_cli::Command {
    let mut full = vec!["muster"];
    full.extend_from_slice(argv);
    muster_cli::parse_args(full.into_iter().map(Into::into).collect())
        .unwrap()
        .command
}

fn squeue(argv: &[&str]) -> String {
    let mut full = vec!["squeue"];
    full.extend_from_slice(argv);
    let muster_cli::Command::Squeue(args) = cli(&full) else {
        panic!()
    };
    let rows = job_rows(&fixtures::jobs(), fixtures::now(), args.array);
    let (text, warnings) =
        muster_cli::squeue::report(&args, rows, "alice", &TimeZone::UTC).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    text
}

fn sinfo(argv: &[&str]) -> String {
    let mut full = vec!["sinfo"];
    full.extend_from_slice(argv);
    let muster_cli::Command::Sinfo(args) = cli(&full) else {
        panic!()
    };
    let (parts, nodes) = cluster_rows(
        &fixtures::partitions(),
        &fixtures::nodes(),
        &[],
        &fixtures::jobs(),
    );
    let (text, warnings) =
        muster_cli::sinfo::report(&args, &parts, &nodes, &TimeZone::UTC).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    text
}

fn sacct(argv: &[&str]) -> String {
    let mut full = vec!["sacct"];
    full.extend_from_slice(argv);
    let muster_cli::Command::Sacct(args) = cli(&full) else {
        panic!()
    };
    let rows = job_rows(&fixtures::jobs(), fixtures::now(), false);
    muster_cli::sacct::report(&args, rows, "alice", fixtures::now(), &TimeZone::UTC).unwrap()
}

#[test]
fn squeue_default() {
    assert_eq!(
        squeue(&[]),
        "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)
               102       gpu gpus_per    alice PD       0:00      2 (Resources)
               103       gpu     eval      bob PD       0:00      1 (Dependency)
      110_[2-15%4]       gpu    sweep    alice PD       0:00      1 (JobArrayTaskLimit)
               101       gpu    train    alice  R       5:03      2 gpu[001-002]
             110_0       gpu    sweep    alice  R       1:03      1 gpu003
             110_1       gpu    sweep    alice  R       1:03      1 gpu004
               105 interacti verylong christop  R    1:05:03      1 gpu005
"
    );
}

#[test]
fn squeue_long() {
    assert_eq!(
        squeue(&["-l", "-p", "gpu", "-t", "R"]),
        "             JOBID PARTITION     NAME     USER    STATE       TIME TIME_LIMI  NODES NODELIST(REASON)
               101       gpu    train    alice  RUNNING       5:03   1:00:00      2 gpu[001-002]
             110_0       gpu    sweep    alice  RUNNING       1:03   NOT_SET      1 gpu003
             110_1       gpu    sweep    alice  RUNNING       1:03   NOT_SET      1 gpu004
"
    );
}

#[test]
fn squeue_start() {
    assert_eq!(
        squeue(&["--start"]),
        "             JOBID PARTITION     NAME     USER ST          START_TIME  NODES SCHEDNODES           NODELIST(REASON)
               102       gpu gpus_per    alice PD 2024-05-01T10:30:00      2 (null)               (Resources)
               103       gpu     eval      bob PD                 N/A      1 (null)               (Dependency)
      110_[2-15%4]       gpu    sweep    alice PD                 N/A      1 (null)               (JobArrayTaskLimit)
"
    );
}

#[test]
fn squeue_custom_format_and_filters() {
    // -h, -u, -j (an array id selects its elements), left-justified and suffixed fields.
    assert_eq!(
        squeue(&["-h", "-u", "alice", "-j", "110", "-o", "%-8i|%T|%b|%C|%D|%l|%L|%S|%V|%r|%a|%N"]),
        "110_[2-1|PENDING|gres:gpu:1|1|1|NOT_SET|NOT_SET|N/A|2024-05-01T10:03:50|JobArrayTaskLimit|team-a|
110_0   |RUNNING|gres:gpu:1|1|1|NOT_SET|NOT_SET|2024-05-01T10:04:00|2024-05-01T10:03:50|None|team-a|gpu003
110_1   |RUNNING|gres:gpu:1|1|1|NOT_SET|NOT_SET|2024-05-01T10:04:00|2024-05-01T10:03:50|None|team-a|gpu004
"
    );
    // A job named with -j shows whatever its state; %M of an ended job is its run time.
    assert_eq!(
        squeue(&[
            "-j",
            "106,104",
            "-o",
            "%.4i %.9T %.6M %.10l %.10L %R %E %f %u %j"
        ]),
        "JOBI     STATE   TIME TIME_LIMIT  TIME_LEFT NODELIST(REASON) DEPENDENCY FEATURES USER NAME
 104 COMPLETED  30:05  UNLIMITED  UNLIMITED gpu006 (null) (null) alice done
 106    FAILED   2:30      30:00      27:30 (NonZeroExitCode) (null) (null) alice crash
"
    );
    // --me, state names in any case, names.
    assert_eq!(
        squeue(&[
            "--me",
            "-t",
            "pd",
            "-n",
            "eval,gpus_per_task_test",
            "-o",
            "%i %j"
        ]),
        "JOBID NAME\n102 gpus_per_task_test\n"
    );
    assert_eq!(squeue(&["-u", "nobody", "-h"]), "");
}

#[test]
fn squeue_one_line_per_array_element() {
    let text = squeue(&["-r", "-j", "110", "-o", "%.7i %.6A %.2t %R"]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "  JOBID  JOBID ST NODELIST(REASON)");
    assert_eq!(lines[1], "  110_2    113 PD (JobArrayTaskLimit)");
    assert_eq!(lines[2], "  110_3    110 PD (JobArrayTaskLimit)");
    assert_eq!(lines[14], " 110_15    110 PD (JobArrayTaskLimit)");
    assert_eq!(lines[15], "  110_0    111  R gpu003");
    assert_eq!(lines[16], "  110_1    112  R gpu004");
    assert_eq!(lines.len(), 17);
}

#[test]
fn squeue_reports_bad_format_letters_like_slurm() {
    let muster_cli::Command::Squeue(args) = cli(&["squeue", "-o", "%i %W %j"]) else {
        panic!()
    };
    let rows = job_rows(&fixtures::jobs(), fixtures::now(), false);
    let (text, warnings) =
        muster_cli::squeue::report(&args, rows, "alice", &TimeZone::UTC).unwrap();
    assert_eq!(warnings, ["Invalid job format specification: W"]);
    assert!(
        text.starts_with("JOBID NAME\n102 gpus_per_task_test\n"),
        "{text}"
    );
}

#[test]
fn sinfo_partitions() {
    assert_eq!(
        sinfo(&[]),
        "PARTITION   AVAIL  TIMELIMIT  NODES  STATE NODELIST
debug        down   infinite      0    n/a 
gpu*           up 1-00:00:00      1  down* gpu007
gpu*           up 1-00:00:00      1  drain gpu008
gpu*           up 1-00:00:00      2    mix gpu[003-004]
gpu*           up 1-00:00:00      2  alloc gpu[001-002]
gpu*           up 1-00:00:00      1   idle gpu006
interactive    up    1:00:00      1    mix gpu005
"
    );
}

#[test]
fn sinfo_nodes() {
    assert_eq!(
        sinfo(&["-N"]),
        "NODELIST   NODES   PARTITION STATE 
gpu001         1        gpu* alloc 
gpu002         1        gpu* alloc 
gpu003         1        gpu* mix   
gpu004         1        gpu* mix   
gpu005         1 interactive mix   
gpu006         1        gpu* idle  
gpu007         1        gpu* down* 
gpu008         1        gpu* drain 
"
    );
}

#[test]
fn sinfo_gres_and_custom_formats() {
    assert_eq!(
        sinfo(&["-p", "gpu", "-o", "%P %.6t %D %G %N"]),
        "PARTITION  STATE NODES GRES NODELIST
gpu*  down* 1 gpu:h100:8 gpu007
gpu*  drain 1 gpu:h100:8 gpu008
gpu*    mix 2 gpu:h100:8 gpu[003-004]
gpu*  alloc 2 gpu:h100:8 gpu[001-002]
gpu*   idle 1 gpu:h100:8 gpu006
"
    );
    assert_eq!(
        sinfo(&["-s"]),
        "PARTITION   AVAIL  TIMELIMIT   NODES(A/I/O/T) NODELIST
debug        down   infinite          0/0/0/0 
gpu*           up 1-00:00:00          4/1/2/7 gpu[001-004,006-008]
interactive    up    1:00:00          1/0/0/1 gpu005
"
    );
    assert_eq!(
        sinfo(&["-t", "idle,mix", "-h", "-o", "%R %T %c %m %f %C %E"]),
        "gpu mixed 96 1056000 ib,nvlink 2/190/0/192 none
gpu idle 96 1056000 ib,nvlink 0/96/0/96 none
interactive mixed 96 1056000 (null) 4/92/0/96 none
"
    );
    assert_eq!(
        sinfo(&["-n", "gpu[007-008]", "-o", "%N %t %E", "-h"]),
        "gpu007 down* Not responding\ngpu008 drain Cordoned\n"
    );
}

/// `-l`, every field known (Slurm 22.05's columns).
#[test]
fn sinfo_long() {
    assert_eq!(
        sinfo(&["-l", "-p", "interactive"]),
        "PARTITION   AVAIL  TIMELIMIT   JOB_SIZE ROOT OVERSUBS     GROUPS  NODES       STATE NODELIST
interactive    up    1:00:00 1-infinite   no       NO        all      1       mixed gpu005
"
    );
}

/// `-O` names fields as Slurm's squeue and sinfo do: 20 wide unless sized, `.` to the
/// right, suffixes, nothing between; an unknown name is named.
#[test]
fn long_formats_by_field_name() {
    assert_eq!(
        squeue(&["-j", "101", "-O", "JobID:5,Name:.10,State:.12 ,TimeLimit"]),
        "JOBID      NAME       STATE TIME_LIMIT          \n101       train     RUNNING 1:00:00             \n"
    );
    assert_eq!(
        sinfo(&[
            "-N",
            "-n",
            "gpu00[3-4]",
            "-O",
            "NodeList:10,Gres:12,GresUsed"
        ]),
        "NODELIST  GRES        GRES_USED           \ngpu003    gpu:h100:8  gpu:h100:1(IDX:0)   \ngpu004    gpu:h100:8  gpu:h100:1(IDX:0)   \n"
    );
    let muster_cli::Command::Squeue(args) = cli(&["squeue", "-O", "JobID,Bogus"]) else {
        panic!()
    };
    let rows = job_rows(&fixtures::jobs(), fixtures::now(), false);
    let (_, warnings) = muster_cli::squeue::report(&args, rows, "alice", &TimeZone::UTC).unwrap();
    assert_eq!(warnings, ["Invalid job format specification: Bogus"]);
}

/// Every format the commands choose by themselves prints only fields they know.
#[test]
fn built_in_formats_know_every_field() {
    use muster_cli::{format::parse_format, sinfo, squeue};
    for f in [
        sinfo::DEFAULT_FORMAT,
        sinfo::NODE_FORMAT,
        sinfo::LONG_FORMAT,
        sinfo::NODE_LONG_FORMAT,
        sinfo::SUMMARIZE_FORMAT,
        sinfo::REASONS_FORMAT,
        sinfo::REASONS_LONG_FORMAT,
    ] {
        assert_eq!(
            parse_format(f, sinfo::valid_code).1,
            Vec::<String>::new(),
            "{f}"
        );
    }
    for f in [
        squeue::DEFAULT_FORMAT,
        squeue::LONG_FORMAT,
        squeue::START_FORMAT,
    ] {
        assert_eq!(
            parse_format(f, squeue::valid_code).1,
            Vec::<String>::new(),
            "{f}"
        );
    }
}

/// `-l` with `-N` and `-R`, as Slurm 22.05 prints them: CPUS left-justified; the reasons with
/// the state, each state its own line.
#[test]
fn sinfo_long_views() {
    assert_eq!(
        sinfo(&["-N", "-l", "-n", "gpu00[5-8]"]),
        "NODELIST   NODES   PARTITION       STATE CPUS    S:C:T MEMORY TMP_DISK WEIGHT AVAIL_FE REASON              
gpu005         1 interactive       mixed 96      *:*:* 105600        0      1   (null) none                
gpu006         1        gpu*        idle 96      *:*:* 105600        0      1 ib,nvlin none                
gpu007         1        gpu*       down* 96      *:*:* 105600        0      1 ib,nvlin Not responding      
gpu008         1        gpu*     drained 96      *:*:* 105600        0      1 ib,nvlin Cordoned            
"
    );
    assert_eq!(
        sinfo(&["-R", "-l"]),
        "REASON               USER         TIMESTAMP           STATE  NODELIST
Not responding       Unknown      Unknown             down*  gpu007
Cordoned             Unknown      Unknown             drain  gpu008
"
    );
}

/// `-o` with `-l` is refused; `-N`, `-R` and `-s` set `SINFO_FORMAT` aside, `-l` does not
/// (as Slurm 22.05 does).
#[test]
fn sinfo_format_sources() {
    let args = |argv: &[&str], env: Option<&str>| {
        let mut full = vec!["sinfo"];
        full.extend_from_slice(argv);
        let muster_cli::Command::Sinfo(mut a) = cli(&full) else {
            panic!()
        };
        a.env_format = env.map(str::to_string);
        muster_cli::sinfo::format_of(&a)
    };
    assert_eq!(
        args(&["-l", "-o", "%P"], None).unwrap_err(),
        "Options -o(--format) and -l(--long) are mutually exclusive. Please remove one and retry."
    );
    assert_eq!(args(&["-l"], Some("%P")).unwrap(), "%P");
    assert_eq!(args(&[], Some("%P")).unwrap(), "%P");
    assert_eq!(args(&["-N", "-o", "%N"], Some("%P")).unwrap(), "%N");
    assert_eq!(
        args(&["-N"], Some("%P")).unwrap(),
        muster_cli::sinfo::NODE_FORMAT
    );
    assert_eq!(
        args(&["-s"], Some("%P")).unwrap(),
        muster_cli::sinfo::SUMMARIZE_FORMAT
    );
    assert_eq!(
        args(&["-R", "-l"], Some("%P")).unwrap(),
        muster_cli::sinfo::REASONS_LONG_FORMAT
    );
    assert_eq!(args(&["-l"], None).unwrap(), muster_cli::sinfo::LONG_FORMAT);
}

/// `--nodelist`, `--exclude` and `--exclusive=user` as squeue (`%n`, `%x`, `%h`) and scontrol
/// (`ReqNodeList`, `ExcNodeList`, `OverSubscribe`) print them.
#[test]
fn requested_and_excluded_nodes_are_shown() {
    let rows = job_rows(&fixtures::jobs(), fixtures::now(), true);
    let r = rows.iter().find(|r| r.job_id == Some(102)).unwrap();
    let shown = muster_cli::scontrol::show_job(r, &TimeZone::UTC, false);
    assert!(
        shown.contains("\n   ReqNodeList=gpu[003-004] ExcNodeList=gpu007\n"),
        "{shown}"
    );
    assert!(shown.contains("OverSubscribe=USER"), "{shown}");
    let (format, _) =
        muster_cli::format::parse_format("%i %n %x %h", muster_cli::squeue::valid_code);
    let out = muster_cli::squeue::render(&rows[..2], &format, true, &TimeZone::UTC);
    assert_eq!(
        out,
        "JOBID REQ_NODES EXC_NODES OVER_SUBSCRIBE\n101   NO\n102 gpu[003-004] gpu007 USER\n"
    );
}

#[test]
fn scontrol_show_job() {
    let rows = job_rows(&fixtures::jobs(), fixtures::now(), true);
    let r = rows.iter().find(|r| r.job_id == Some(101)).unwrap();
    assert_eq!(
        muster_cli::scontrol::show_job(r, &TimeZone::UTC, false),
        "JobId=101 JobName=train
   UserId=alice
   Priority=N/A Nice=0 Account=team-a QOS=(null)
   JobState=RUNNING Reason=None Dependency=(null)
   Requeue=1 Restarts=0 ExitCode=0:0
   RunTime=00:05:03 TimeLimit=01:00:00
   SubmitTime=2024-05-01T09:59:00 EligibleTime=2024-05-01T09:59:00
   StartTime=2024-05-01T10:00:00 EndTime=2024-05-01T11:00:00
   Partition=gpu
   ReqNodeList=(null) ExcNodeList=(null)
   NodeList=gpu[001-002]
   BatchHost=gpu001
   NumNodes=2 NumCPUs=16 NumTasks=2 CPUs/Task=8
   TRES=cpu=16,node=2,gres/gpu=16
   Features=(null) OverSubscribe=NO
   StdErr=train-101.out
   StdOut=train-101.out
   TresPerNode=gres:gpu:8
   BatchJob=team-a/train-abcde
"
    );
    let r = rows
        .iter()
        .find(|r| r.array_task_id == Some(2) && r.job_id == Some(113))
        .unwrap();
    assert_eq!(
        muster_cli::scontrol::show_job(r, &TimeZone::UTC, true),
        "JobId=113 ArrayJobId=110 ArrayTaskId=2 JobName=sweep UserId=alice Priority=N/A Nice=0 \
         Account=team-a QOS=(null) \
         JobState=PENDING Reason=JobArrayTaskLimit Dependency=(null) Requeue=1 Restarts=0 \
         ExitCode=0:0 RunTime=00:00:00 TimeLimit=NOT_SET SubmitTime=2024-05-01T10:03:50 \
         EligibleTime=Unknown StartTime=Unknown EndTime=Unknown Partition=gpu ReqNodeList=(null) \
         ExcNodeList=(null) NodeList=(null) \
         NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 TRES=cpu=1,node=1,gres/gpu=1 \
         Features=(null) OverSubscribe=OK StdErr=(pod log) StdOut=(pod log) \
         TresPerNode=gres:gpu:1 BatchJob=team-a/sweep-sssss-2\n"
    );
}

#[test]
fn scontrol_show_partition_and_node() {
    let (parts, nodes) = cluster_rows(
        &fixtures::partitions(),
        &fixtures::nodes(),
        &[],
        &fixtures::jobs(),
    );
    let gpu = parts.iter().find(|p| p.name == "gpu").unwrap();
    assert_eq!(
        muster_cli::scontrol::show_partition(gpu, &nodes, false),
        "PartitionName=gpu
   AllowAccounts=ALL Default=YES
   DefaultTime=NONE
   MaxNodes=UNLIMITED MaxTime=1-00:00:00 MinNodes=0
   Nodes=gpu[001-004,006-008]
   PriorityTier=1 OverSubscribe=NO PreemptMode=OFF
   State=UP TotalCPUs=672 TotalNodes=7
   TRES=cpu=672,mem=7392000M,node=7,gres/gpu=56
"
    );
    let n = nodes.iter().find(|n| n.name == "gpu003").unwrap();
    assert_eq!(
        muster_cli::scontrol::show_node(n, &TimeZone::UTC, false),
        "NodeName=gpu003 Arch=amd64
   CPUAlloc=1 CPUTot=96
   AvailableFeatures=ib,nvlink
   ActiveFeatures=ib,nvlink
   Gres=gpu:h100:8
   NodeAddr=gpu003 NodeHostName=gpu003
   RealMemory=1056000 AllocMem=1024
   State=MIXED
   Partitions=gpu
   CfgTRES=cpu=96,mem=1056000M,gres/gpu=8
   AllocTRES=cpu=1,mem=1024M,gres/gpu=1
"
    );
    let n = nodes.iter().find(|n| n.name == "gpu007").unwrap();
    assert!(
        muster_cli::scontrol::show_node(n, &TimeZone::UTC, true)
            .contains(" State=DOWN+NOT_RESPONDING Partitions=gpu "),
    );
}

#[test]
fn sacct_default_and_parsable() {
    // Default: my jobs since midnight; arrays' pending indices on one line.
    assert_eq!(
        sacct(&[]),
        "JobID           JobName  Partition    Account  AllocCPUS      State ExitCode 
------------ ---------- ---------- ---------- ---------- ---------- -------- 
101               train        gpu     team-a         16    RUNNING      0:0 
102          gpus_per_+        gpu     team-a          0    PENDING      0:0 
104                done        gpu     team-a          1  COMPLETED      0:0 
106               crash        gpu     team-a          1     FAILED      3:0 
107                oops        gpu     team-a          0  CANCELLED     0:15 
110_[2-15%4]      sweep        gpu     team-a          0    PENDING      0:0 
110_0             sweep        gpu     team-a          1    RUNNING      0:0 
110_1             sweep        gpu     team-a          1    RUNNING      0:0 
"
    );
    assert_eq!(
        sacct(&[
            "-P",
            "-j",
            "106,107",
            "-o",
            "JobID,JobName,State,ExitCode,Elapsed,NNodes,NodeList"
        ]),
        "JobID|JobName|State|ExitCode|Elapsed|NNodes|NodeList
106|crash|FAILED|3:0|00:02:30|1|gpu006
107|oops|CANCELLED|0:15|00:00:00|1|None assigned
"
    );
    assert_eq!(
        sacct(&[
            "-p",
            "-n",
            "-a",
            "-s",
            "R",
            "-o",
            "jobid,user,start,end,timelimit,alloctres"
        ]),
        "101|alice|2024-05-01T10:00:00|Unknown|01:00:00|cpu=16,gres/gpu=16,node=2|
105|christopher|2024-05-01T09:00:00|Unknown|02:00:00|cpu=4,node=1|
110_0|alice|2024-05-01T10:04:00|Unknown|Partition_Limit|cpu=1,gres/gpu=1,node=1|
110_1|alice|2024-05-01T10:04:00|Unknown|Partition_Limit|cpu=1,gres/gpu=1,node=1|
"
    );
    assert_eq!(
        sacct(&["-j", "101", "-o", "jobid%5,jobname%3,elapsed"]),
        "JobID Job    Elapsed 
----- --- ---------- 
101   tr+   00:05:03 
"
    );
}

/// CPUTime (CPUs held x time held), the raw limit in minutes, the derived exit code and the
/// priority, as sacct names and sizes them.
#[test]
fn sacct_cpu_time_raw_limit_and_derived_exit_code() {
    assert_eq!(
        sacct(&[
            "-j",
            "101,106,102",
            "-o",
            "JobID,CPUTime,CPUTimeRAW,TimelimitRaw,DerivedExitCode"
        ]),
        "JobID           CPUTime CPUTimeRAW TimelimitR DerivedExitCode 
------------ ---------- ---------- ---------- --------------- 
101            01:20:48       4848         60             0:0 
102            00:00:00          0         10             0:0 
106            00:02:30        150         30             3:0 
"
    );
}

/// `-e` lists the fields, `--delimiter` replaces `|`, `-A` keeps an account's jobs.
#[test]
fn sacct_field_list_delimiter_and_accounts() {
    let list = muster_cli::sacct::help_format();
    assert_eq!(
        list.lines().next(),
        Some("Account             AllocCPUS           AllocNodes          AllocTRES           ")
    );
    for name in ["CPUTime", "DerivedExitCode", "WorkDir", "Reason"] {
        assert!(list.contains(&format!("{name} ")), "{name}: {list}");
    }
    assert_eq!(
        sacct(&[
            "-P",
            "-n",
            "--delimiter=,",
            "-j",
            "106,107",
            "-o",
            "JobID,State,ExitCode"
        ]),
        "106,FAILED,3:0\n107,CANCELLED,0:15\n"
    );
    assert_eq!(
        sacct(&[
            "-p",
            "-n",
            "--delimiter",
            "::",
            "-j",
            "106",
            "-o",
            "JobID,State"
        ]),
        "106::FAILED::\n"
    );
    assert_eq!(sacct(&["-a", "-n", "-A", "nobody-account"]), "");
    assert_eq!(
        sacct(&["-a", "-n", "-A", "team-b", "-o", "JobID,Account"]),
        "105              team-b \n"
    );
}

#[test]
fn sacct_refuses_unknown_fields() {
    let muster_cli::Command::Sacct(args) = cli(&["sacct", "-o", "jobid,bogus"]) else {
        panic!()
    };
    let err =
        muster_cli::sacct::report(&args, Vec::new(), "alice", fixtures::now(), &TimeZone::UTC)
            .unwrap_err();
    assert_eq!(err, "Invalid field requested: \"bogus\"");
}

#[test]
fn squeue_refuses_malformed_job_ids() {
    let muster_cli::Command::Squeue(args) = cli(&["squeue", "-j", "12,abc"]) else {
        panic!()
    };
    let err = muster_cli::squeue::report(&args, Vec::new(), "alice", &TimeZone::UTC).unwrap_err();
    assert_eq!(err, "Invalid job id: abc");
}

#[test]
fn squeue_sort_keys() {
    // Longest running first; the pending ones (0:00) keep the default order among themselves.
    assert_eq!(
        squeue(&["-h", "-o", "%i %M", "-S", "-M"]),
        "105 1:05:03\n101 5:03\n110_0 1:03\n110_1 1:03\n102 0:00\n103 0:00\n110_[2-15%4] 0:00\n"
    );
    // By user, then by id descending (an array's elements after their pending record).
    assert_eq!(
        squeue(&["-h", "-o", "%.8u %i", "-S", "+u,-i"]),
        "   alice 110_1\n   alice 110_0\n   alice 110_[2-15%4]\n   alice 102\n   alice 101\n     bob 103\nchristop 105\n"
    );
    // Slurm's default spelled out gives the default order.
    assert_eq!(squeue(&["-S", "P,t,-p"]), squeue(&[]));
    let muster_cli::Command::Squeue(args) = cli(&["squeue", "-S", "P,x"]) else {
        panic!()
    };
    let err = muster_cli::squeue::report(&args, Vec::new(), "alice", &TimeZone::UTC).unwrap_err();
    assert!(err.starts_with("Invalid sort specification: x "), "{err}");
}

#[test]
fn date_line_pads_the_day_with_a_zero_as_slurm_does() {
    let t: jiff::Timestamp = "2026-01-05T10:00:00Z".parse().unwrap();
    assert_eq!(
        muster_cli::format::date_line(t, &TimeZone::UTC),
        "Mon Jan 05 10:00:00 2026"
    );
}

/// `-o` with `-l` is refused; `-l` and `--start` set `SQUEUE_FORMAT` aside, which otherwise
/// replaces the default (as Slurm 22.05 does).
#[test]
fn squeue_format_sources() {
    let args = |argv: &[&str], env: Option<&str>| {
        let mut full = vec!["squeue"];
        full.extend_from_slice(argv);
        let muster_cli::Command::Squeue(mut a) = cli(&full) else {
            panic!()
        };
        a.env_format = env.map(str::to_string);
        muster_cli::squeue::format_of(&a)
    };
    assert_eq!(
        args(&["-l", "-o", "%i"], None).unwrap_err(),
        "Options -o(--format) and -l(--long) are mutually exclusive. Please remove one and retry."
    );
    assert_eq!(args(&[], Some("%i")).unwrap(), "%i");
    assert_eq!(args(&["-o", "%j"], Some("%i")).unwrap(), "%j");
    assert_eq!(
        args(&["-l"], Some("%i")).unwrap(),
        muster_cli::squeue::LONG_FORMAT
    );
    assert_eq!(
        args(&["--start"], Some("%i")).unwrap(),
        muster_cli::squeue::START_FORMAT
    );
}
