# The config's plan (diversed.experiment.plan): every rule's inputs, outputs, shell flags, threads and GPU come from its one
# table of jobs; helpers and wildcard constraints here, no rules. Parsing the workflow imports no torch.
# Rules' priority (local scheduling): 3 what the sweeps wait on (heads, lambda, AutoJudge), 2 the sweeps, 1 the
# untimed decodes and the fine-tuned drafts, 0 the timed jobs, which take every core: they run once the rest is done,
# so that untimed work fills both cores while it lasts.
import re
import shlex
import sys

from diversed.experiment.plan import NUMBER, Plan, shown


try:
    PLAN = Plan(config)  # the config validated (schema, the verifier registry, cross-key checks) and expanded once
except ValueError as e:  # one line and exit 2, as the diversed command's bad input (no Snakemake traceback)
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)


def flagged(rule):
    """A rule's outputs, those `snakemake --report` shows flagged with report(): their category and caption
    (workflow/report/, experiment.plan.shown)."""

    def flag(path):
        if (how := shown(path)) is None:
            return path
        return report(path, caption=f"../report/{how[1]}.rst", category=how[0])

    return {k: [flag(p) for p in v] if isinstance(v, list) else flag(v) for k, v in PLAN.outputs(rule).items()}


def one_of(names):
    return "|".join(re.escape(n) for n in names) or "(?!)"  # (?!): matches nothing


wildcard_constraints:
    pair=one_of(PLAN.pairs),
    task=one_of(PLAN.tasks),
    head_task=one_of(PLAN.transfer_head_tasks),
    T=NUMBER,
    K=r"\d+",
    lam=NUMBER,
    seed=r"\d+",


def inputs(rule):
    """A rule's inputs at a job's wildcards (the hub sources ancient: a later fetch of a new source reruns
    nothing)."""

    def get(wildcards):
        found = dict(PLAN.job(rule, wildcards).inputs)
        if "sources" in found:
            found["sources"] = ancient(found["sources"])
        return found

    return get


def params(rule):
    """A rule's named shell flags at a job's wildcards."""
    names = PLAN.of(rule)[0].flags if PLAN.of(rule) else {}
    return {name: (lambda wildcards, name=name: PLAN.job(rule, wildcards).flags[name]) for name in names}


def threads(rule):
    """A job's threads: the plan's (an untimed job's config job_threads), or every core of a local run for a
    timed job and the pair's build (nothing runs beside them); cluster profiles set each rule's with
    set-threads."""
    return lambda wildcards: min(PLAN.job(rule, wildcards).threads or workflow.cores, workflow.cores)


def gpu(rule):
    """Decoding and training claim the GPU of a CUDA pair (profiles cap gpu at one per machine)."""
    return lambda wildcards: PLAN.job(rule, wildcards).gpu
