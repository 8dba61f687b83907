rule sweep:
    """The fronts in one job: decode + score the task's dev split (disjoint from the eval prompts reported and the
    train prompts) at strict (w = 1), each w and mixing of the grid and each knob of the families in methods, and
    DIVERSED and the target alone as the fronts' references, then sweep.csv / .md and in choice.json the task's
    fixed w and each family's knob: the largest acceptance whose quality is non-inferior to strict's. A rerun keeps
    the points already finished, so a sweep stopped by a time limit resumes where it stopped."""
    input:
        unpack(inputs("sweep")),
    output:
        **PLAN.outputs("sweep"),
    params:
        **params("sweep"),
    threads: threads("sweep")
    priority: 2
    resources:
        gpu=gpu("sweep"),
    log:
        "logs/sweep/{pair}/{task}/T{T}-K{K}.log",
    benchmark:
        "logs/benchmarks/sweep/{pair}/{task}/T{T}-K{K}.tsv",
    conda:
        "../../environment.yml"
    shell:
        "OMP_NUM_THREADS={threads} WANDB_MODE=${{WANDB_MODE:-offline}} HF_HUB_OFFLINE=1 "  # torch's threads; no network
        "diversed sweep-weight {params.pair} {params.prompts} {params.decoding} {params.grid} "
        "{params.references} {params.tolerance} --batch-size {params.batch} {params.execution} --out {params.out} "
        "{params.labels} > {log} 2>&1"


rule sweep_lambda:
    """DIVERSED's lambda, chosen on dev: the task's dev split decoded + scored with strict and with the head trained
    at each lambda of lambda_sweep, one chosen (the largest acceptance non-inferior to strict's quality among the
    heads that did not collapse; else the smallest lambda) and copied as the task's head; lambda.csv / .md list
    every candidate with its verdict and collapse flag."""
    wildcard_constraints:
        task=one_of(PLAN.lambda_tasks),
    input:
        unpack(inputs("sweep_lambda")),
    output:
        **PLAN.outputs("sweep_lambda"),
    params:
        **params("sweep_lambda"),
    threads: threads("sweep_lambda")
    priority: 3
    resources:
        gpu=gpu("sweep_lambda"),
    log:
        "logs/sweep_lambda/{pair}/{task}.log",
    benchmark:
        "logs/benchmarks/sweep_lambda/{pair}/{task}.tsv",
    conda:
        "../../environment.yml"
    shell:
        "OMP_NUM_THREADS={threads} WANDB_MODE=${{WANDB_MODE:-offline}} HF_HUB_OFFLINE=1 "  # torch's threads; no network
        "diversed sweep-lambda {params.pair} {params.prompts} {params.decoding} {params.heads} "
        "{params.tolerance} --batch-size {params.batch} {params.execution} --out {params.out} "
        "--head-out {params.head_out} {params.labels} > {log} 2>&1"


rule time_sweep:
    """Timing of the fronts: every point of one sweep (pair, task, T, K), DIVERSED and the target alone on the
    first sweep.n_timing dev prompts at batch 1, interleaved prompt by prompt in one job on every core, each
    scored. The fronts against tokens/s read these times; their quality is the sweep's, over every dev prompt."""
    input:
        unpack(inputs("time_sweep")),
    output:
        **PLAN.outputs("time_sweep"),
    params:
        **params("time_sweep"),
    threads: threads("time_sweep")
    resources:
        gpu=gpu("time_sweep"),
    log:
        "logs/time_sweep/{pair}/{task}/T{T}-K{K}.log",
    benchmark:
        "logs/benchmarks/time_sweep/{pair}/{task}/T{T}-K{K}.tsv",
    conda:
        "../../environment.yml"
    shell:
        "OMP_NUM_THREADS={threads} WANDB_MODE=${{WANDB_MODE:-offline}} HF_HUB_OFFLINE=1 "  # torch's threads; no network
        "diversed generate {params.pair} {params.prompts} {params.decoding} {params.labels} "
        "{params.execution} --interleave {params.runs} --score --job {output.job} > {log} 2>&1"
