rule train_head:
    """The DIVERSED weight head for one task (REINFORCE; resumable from its checkpoint)."""
    input:
        lambda wc: models_marker(wc.pair),
    output:
        head="results/heads/{pair}/{task}/head.safetensors",
        log_csv="results/heads/{pair}/{task}/train_log.csv",
    params:
        args=train_args,
        h=HEAD_ARGS,
        max_new=lambda wc: TASKS[wc.task]["max_new_tokens"],
    resources:
        gpu=lambda wc: gpu(wc.pair),
    log:
        "logs/train_head/{pair}/{task}.log",
    conda:
        "../../environment.yml"
    shell:
        "diversed train head {params.args} --out results/heads/{wildcards.pair}/{wildcards.task} {params.h} "
        "--max-new-tokens {params.max_new} > {log} 2>&1"


rule distill_draft:
    """The fine-tuned-draft baseline: the draft distilled toward the target on the task's training prompts."""
    input:
        lambda wc: models_marker(wc.pair),
    output:
        directory("resources/drafts/{pair}/{task}"),
    params:
        args=train_args,
        d=DISTILL_ARGS,
        max_new=lambda wc: TASKS[wc.task]["max_new_tokens"],
    resources:
        gpu=lambda wc: gpu(wc.pair),
    log:
        "logs/distill_draft/{pair}/{task}.log",
    conda:
        "../../environment.yml"
    shell:
        "diversed train draft {params.args} --out {output} {params.d} --max-new-tokens {params.max_new} > {log} 2>&1"


rule sweep_weight:
    """The static frontier of one task at (T, K): decode + score a grid of fixed w, choose the task's w."""
    input:
        lambda wc: models_marker(wc.pair),
    output:
        choice="results/sweeps/{pair}/{task}/T{T}-K{K}/choice.json",
        table="results/sweeps/{pair}/{task}/T{T}-K{K}/sweep.csv",
    params:
        pair=lambda wc: pair_args(wc.pair),
        data=lambda wc: f"--data-files {TASKS[wc.task]['data_files']}" if TASKS[wc.task]["data_files"] else "",
        n=SWEEP["n_eval"],
        max_new=lambda wc: TASKS[wc.task]["max_new_tokens"],
        weights=" ".join(str(w) for w in SWEEP["weights"]),
        mixings=" ".join(SWEEP["mixings"]),
        tolerance=f"--tolerance {SWEEP['tolerance']}" if SWEEP["tolerance"] is not None else "",
        experiment=EXPERIMENT,
    resources:
        gpu=lambda wc: gpu(wc.pair),
    log:
        "logs/sweep_weight/{pair}/{task}/T{T}-K{K}.log",
    conda:
        "../../environment.yml"
    shell:
        "diversed sweep-weight {params.pair} --task {wildcards.task} {params.data} -n {params.n} "
        "--max-new-tokens {params.max_new} --temperature {wildcards.T} -K {wildcards.K} "
        "--weights {params.weights} --mixings {params.mixings} {params.tolerance} "
        "--label pair={wildcards.pair} --label experiment={params.experiment} "
        "--out results/sweeps/{wildcards.pair}/{wildcards.task}/T{wildcards.T}-K{wildcards.K} > {log} 2>&1"
