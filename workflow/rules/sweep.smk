rule sweep:
    """The fronts in one job: decode + score the task's dev split (disjoint from the eval prompts reported and the
    train prompts) at strict (w = 1), each w and mixing of the grid and each knob of the families in methods, and
    DIVERSED and the target alone as the fronts' references, then sweep.csv / .md and in choice.json the task's
    fixed w and each family's knob: the largest acceptance whose quality is non-inferior to strict's. A rerun keeps
    the points already finished, so a sweep stopped by a time limit resumes where it stopped."""
    input:
        unpack(sweep_inputs),
    output:
        choice=f"{SWEEP_DIR}/choice.json",
        table=f"{SWEEP_DIR}/sweep.csv",
        markdown=f"{SWEEP_DIR}/sweep.md",
    params:
        target=pair_value("target"),
        draft=pair_value("draft"),
        draft_layers=pair_value("draft_layers"),
        dtype=pair_value("dtype"),
        device=pair_value("device"),
        data=data_files,
        n=task_value("n_dev"),
        max_new=task_value("max_new_tokens"),
        sampling=config["sampling"],
        prompt_format=config["prompt_format"],
        weights=SWEEP["weights"],
        mixings=SWEEP["mixings"],
        families=" ".join(f"--{f} {' '.join(str(x) for x in SWEEP['families'][f])}" for f in FAMILIES) +
                 (f" --deferrals {' '.join(SWEEP['deferrals'])}" if "cascade" in FAMILIES else ""),
        references=sweep_references,
        tolerance=f"--tolerance {SWEEP['tolerance']}" if SWEEP["tolerance"] is not None else "",
        experiment=EXPERIMENT,
        batch=config["batch_size"],
        execution=EXECUTION,
        out=lambda wildcards, output: os.path.dirname(output.choice),
    threads: job_threads
    resources:
        gpu=gpus,
    log:
        "logs/sweep/{pair}/{task}/T{T}-K{K}.log",
    conda:
        "../../environment.yml"
    shell:
        "OMP_NUM_THREADS={threads} WANDB_MODE=${{WANDB_MODE:-offline}} HF_HUB_OFFLINE=1 "  # torch's threads; no network
        "diversed sweep-weight --target {params.target} --draft {params.draft} --draft-layers {params.draft_layers} "
        "--dtype {params.dtype} --device {params.device} --task {wildcards.task} {params.data} --split dev "
        "-n {params.n} --max-new-tokens {params.max_new} --temperature {wildcards.T} --sampling {params.sampling} "
        "--prompt-format {params.prompt_format} -K {wildcards.K} --seed 0 "
        "--weights {params.weights} --mixings {params.mixings} {params.families} {params.references} {params.tolerance} "
        "--batch-size {params.batch} "
        "{params.execution} "
        "--out {params.out} "
        "--label pair={wildcards.pair} --label experiment={params.experiment} > {log} 2>&1"


rule sweep_lambda:
    """DIVERSED's lambda, chosen on dev: the task's dev split decoded + scored with strict and with the head trained
    at each lambda of lambda_sweep, one chosen (the largest acceptance non-inferior to strict's quality among the
    heads that did not collapse; else the smallest lambda) and copied as the task's head; lambda.csv / .md list
    every candidate with its verdict and collapse flag."""
    wildcard_constraints:
        task=one_of(LAMBDA_TASKS),
    input:
        unpack(models),
        heads=[lambda_head(lam) for lam in LAMBDA["values"]],
    output:
        head="results/heads/{pair}/{task}/head.safetensors",
        log_csv="results/heads/{pair}/{task}/train_log.csv",
        choice=f"{LAMBDA_DIR}/choice.json",
        table=f"{LAMBDA_DIR}/lambda.csv",
        markdown=f"{LAMBDA_DIR}/lambda.md",
    params:
        **{k: v for k, v in rules.sweep.params.items() if k not in ("weights", "mixings", "families", "references",
                                                                    "out")},
        temperature=LAMBDA["temperature"],
        K=config["K"][0],
        head_out=lambda wildcards, output: os.path.dirname(output.head),
        out=lambda wildcards, output: os.path.dirname(output.choice),
    threads: job_threads
    resources:
        gpu=gpus,
    log:
        "logs/sweep_lambda/{pair}/{task}.log",
    conda:
        "../../environment.yml"
    shell:
        "OMP_NUM_THREADS={threads} WANDB_MODE=${{WANDB_MODE:-offline}} HF_HUB_OFFLINE=1 "  # torch's threads; no network
        "diversed sweep-lambda --target {params.target} --draft {params.draft} --draft-layers {params.draft_layers} "
        "--dtype {params.dtype} --device {params.device} --task {wildcards.task} {params.data} --split dev "
        "-n {params.n} --max-new-tokens {params.max_new} --temperature {params.temperature} --sampling {params.sampling} "
        "--prompt-format {params.prompt_format} -K {params.K} --seed 0 --heads {input.heads} {params.tolerance} "
        "--batch-size {params.batch} "
        "{params.execution} "
        "--out {params.out} --head-out {params.head_out} "
        "--label pair={wildcards.pair} --label experiment={params.experiment} > {log} 2>&1"


rule time_sweep:
    """Timing of the fronts: every point of one sweep (pair, task, T, K), DIVERSED and the target alone on the
    first sweep.n_timing dev prompts at batch 1, interleaved prompt by prompt in one job on every core, each scored. The
    fronts against tokens/s read these times; their quality is the sweep's, over every dev prompt."""
    input:
        unpack(sweep_inputs),
    output:
        manifests=sweep_timing_outputs("manifest.json"),
        generations=sweep_timing_outputs("generations.jsonl"),
        scores=sweep_timing_outputs("scores.json"),
    params:
        **{k: v for k, v in rules.sweep.params.items() if k in ("target", "draft", "draft_layers", "dtype", "device",
                                                                "data", "n", "max_new", "sampling", "prompt_format",
                                                                "experiment", "execution")},
        n_timing=lambda wildcards: SWEEP["n_timing"] or TASKS[wildcards.task]["n_timing"],
        runs=sweep_timing_runs,
    threads: all_cores
    resources:
        gpu=gpus,
    log:
        "logs/time_sweep/{pair}/{task}/T{T}-K{K}.log",
    conda:
        "../../environment.yml"
    shell:
        "OMP_NUM_THREADS={threads} WANDB_MODE=${{WANDB_MODE:-offline}} HF_HUB_OFFLINE=1 "  # torch's threads; no network
        "diversed generate --target {params.target} --draft {params.draft} --draft-layers {params.draft_layers} "
        "--dtype {params.dtype} --device {params.device} --task {wildcards.task} {params.data} --split dev "
        "-n {params.n} --limit {params.n_timing} --max-new-tokens {params.max_new} --temperature {wildcards.T} "
        "--sampling {params.sampling} --prompt-format {params.prompt_format} --seed 0 "
        "--label pair={wildcards.pair} --label task={wildcards.task} --label experiment={params.experiment} "
        "--label timing=1 {params.execution} --interleave {params.runs} --score > {log} 2>&1"
