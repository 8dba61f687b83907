rule decode:
    """Quality: every run of one (pair, task, T, seed) on the task's eval split, in one job, batch_size prompts
    at a time (untimed): target only (and draft only), then each speculative method at each K, each run scored
    through lm-eval once all are decoded (AutoJudge's runs too, on the tasks it runs on); its output is the job's
    manifest, written once every run is scored; a rerun of a failed job decodes only the runs it had not
    finished."""
    input:
        unpack(inputs("decode")),
    output:
        **PLAN.outputs("decode"),
    params:
        **params("decode"),
    threads: threads("decode")
    priority: 1
    resources:
        gpu=gpu("decode"),
    log:
        "logs/decode/{pair}/{task}/T{T}-s{seed}.log",
    benchmark:
        "logs/benchmarks/decode/{pair}/{task}/T{T}-s{seed}.tsv",
    conda:
        "../../environment.yml"
    shell:
        "OMP_NUM_THREADS={threads} WANDB_MODE=${{WANDB_MODE:-offline}} HF_HUB_OFFLINE=1 "  # torch's threads; no network
        "diversed generate {params.pair} {params.prompts} {params.decoding} {params.labels} "
        "{params.execution} --batch-size {params.batch} --keep results/kept {params.runs} --score "
        "--job {output.job} > {log} 2>&1"


rule time:
    """Timing: every method of one (pair, task, T) on the first n_timing eval prompts at batch 1, interleaved
    prompt by prompt in one job on one device, so that a drift of the machine's speed falls on every method
    alike (the speed table, the speedups and the speed claim read only these runs), each scored."""
    input:
        unpack(inputs("time")),
    output:
        **PLAN.outputs("time"),
    params:
        **params("time"),
    threads: threads("time")
    resources:
        gpu=gpu("time"),
    log:
        "logs/time/{pair}/{task}/T{T}.log",
    benchmark:
        "logs/benchmarks/time/{pair}/{task}/T{T}.tsv",
    conda:
        "../../environment.yml"
    shell:
        "OMP_NUM_THREADS={threads} WANDB_MODE=${{WANDB_MODE:-offline}} HF_HUB_OFFLINE=1 "  # torch's threads; no network
        "diversed generate {params.pair} {params.prompts} {params.decoding} {params.labels} "
        "{params.execution} --interleave {params.runs} --score --job {output.job} > {log} 2>&1"


use rule decode as decode_transfer with:
    wildcard_constraints:
        task=one_of(PLAN.tasks),
    input:
        unpack(inputs("decode_transfer")),
    output:
        **PLAN.outputs("decode_transfer"),
    params:
        **params("decode_transfer"),
    threads: threads("decode_transfer")
    priority: 1
    resources:
        gpu=gpu("decode_transfer"),
    log:
        "logs/decode_transfer/{pair}/{task}/dynamic@{head_task}/T{T}-s{seed}.log",
    benchmark:
        "logs/benchmarks/decode_transfer/{pair}/{task}/dynamic@{head_task}/T{T}-s{seed}.tsv",
