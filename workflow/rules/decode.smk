rule decode:
    """Quality: every run of one (pair, task, T, seed) on the task's eval split, in one job, batch_size prompts
    at a time (untimed): target only (and draft only), then each speculative method at each K, each run scored
    through lm-eval once all are decoded."""
    input:
        unpack(decode_inputs),
    output:
        manifests=point_outputs("manifest.json"),
        generations=point_outputs("generations.jsonl"),
        scores=point_outputs("scores.json"),
    params:
        target=pair_value("target"),
        draft=pair_value("draft"),
        draft_layers=pair_value("draft_layers"),
        dtype=pair_value("dtype"),
        device=pair_value("device"),
        data=data_files,
        n=task_value("n_eval"),
        max_new=task_value("max_new_tokens"),
        temperature=lambda wildcards: wildcards.T,
        sampling=config["sampling"],
        prompt_format=config["prompt_format"],
        experiment=EXPERIMENT,
        execution=EXECUTION,
        batch=config["batch_size"],
        runs=point_runs,
    threads: job_threads
    resources:
        gpu=gpus,
    log:
        "logs/decode/{pair}/{task}/T{T}-s{seed}.log",
    conda:
        "../../environment.yml"
    shell:
        "OMP_NUM_THREADS={threads} WANDB_MODE=${{WANDB_MODE:-offline}} HF_HUB_OFFLINE=1 "  # torch's threads; no network
        "diversed generate --target {params.target} --draft {params.draft} --draft-layers {params.draft_layers} "
        "--dtype {params.dtype} --device {params.device} --task {wildcards.task} {params.data} -n {params.n} "
        "--max-new-tokens {params.max_new} --temperature {params.temperature} --sampling {params.sampling} "
        "--prompt-format {params.prompt_format} --seed {wildcards.seed} --label pair={wildcards.pair} --label task={wildcards.task} --label experiment={params.experiment} "
        "{params.execution} --batch-size {params.batch} --keep results/kept {params.runs} --score > {log} 2>&1"


rule time:
    """Timing: every method of one (pair, task, T) on the first n_timing eval prompts at batch 1, interleaved
    prompt by prompt in one job on one device, so that a drift of the machine's speed falls on every method
    alike (the speed table, the speedups and the speed claim read only these runs), each scored."""
    input:
        unpack(decode_inputs),
    output:
        manifests=timing_outputs("manifest.json"),
        generations=timing_outputs("generations.jsonl"),
        scores=timing_outputs("scores.json"),
    params:
        **{k: v for k, v in rules.decode.params.items() if k not in ("batch", "runs")},
        seed=TIMING_SEED,
        n_timing=task_value("n_timing"),
        runs=point_runs,
    threads: all_cores
    resources:
        gpu=gpus,
    log:
        "logs/time/{pair}/{task}/T{T}.log",
    conda:
        "../../environment.yml"
    shell:
        "OMP_NUM_THREADS={threads} WANDB_MODE=${{WANDB_MODE:-offline}} HF_HUB_OFFLINE=1 "  # torch's threads; no network
        "diversed generate --target {params.target} --draft {params.draft} --draft-layers {params.draft_layers} "
        "--dtype {params.dtype} --device {params.device} --task {wildcards.task} {params.data} -n {params.n} "
        "--limit {params.n_timing} --max-new-tokens {params.max_new} --temperature {params.temperature} "
        "--sampling {params.sampling} --prompt-format {params.prompt_format} --seed {params.seed} --label pair={wildcards.pair} --label task={wildcards.task} "
        "--label experiment={params.experiment} --label timing=1 {params.execution} --interleave {params.runs} "
        "--score > {log} 2>&1"


use rule decode as decode_transfer with:
    input:
        unpack(models),
        head="results/heads/{pair}/{head}/head.safetensors",
    output:
        manifests=transfer_outputs("manifest.json"),
        generations=transfer_outputs("generations.jsonl"),
        scores=transfer_outputs("scores.json"),
    params:
        **{k: v for k, v in rules.decode.params.items() if k != "runs"},
        runs=transfer_runs,
    log:
        "logs/decode_transfer/{pair}/{task}/dynamic@{head}/T{T}-s{seed}.log",
