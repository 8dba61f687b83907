rule decode:
    """One speculative decoding run: (pair, task, method, T, K, seed) on the task's eval split."""
    input:
        unpack(decode_inputs),
    output:
        manifest=f"{RUN}/manifest.json",
        generations=f"{RUN}/generations.jsonl",
    params:
        target=pair_value("target"),
        draft=lambda wildcards, input: input.get("draft", PAIRS[wildcards.pair]["draft"]),
        draft_layers=pair_value("draft_layers"),
        dtype=pair_value("dtype"),
        device=pair_value("device"),
        verifier=verifier_flags,
        method=lambda wildcards: wildcards.method.partition("@")[0],
        data=data_files,
        n=task_value("n_eval"),
        max_new=task_value("max_new_tokens"),
        experiment=EXPERIMENT,
        run_dir=lambda wildcards, output: os.path.dirname(output.manifest),
    threads: all_cores
    resources:
        gpu=gpus,
    log:
        "logs/decode/{pair}/{task}/{method}/T{T}-K{K}-s{seed}.log",
    conda:
        "../../environment.yml"
    shell:
        "diversed generate --target {params.target} --draft {params.draft} --draft-layers {params.draft_layers} "
        "--dtype {params.dtype} --device {params.device} {params.verifier} --task {wildcards.task} {params.data} "
        "-n {params.n} --max-new-tokens {params.max_new} --temperature {wildcards.T} -K {wildcards.K} "
        "--seed {wildcards.seed} --run-dir {params.run_dir} --label pair={wildcards.pair} "
        "--label task={wildcards.task} --label method={params.method} --label experiment={params.experiment} "
        "> {log} 2>&1"


rule decode_baseline:
    """One model decoding alone (target only, or draft only) at (pair, task, T, seed): no K."""
    input:
        unpack(models),
    output:
        manifest=f"{BASELINE_RUN}/manifest.json",
        generations=f"{BASELINE_RUN}/generations.jsonl",
    params:
        target=pair_value("target"),
        draft=pair_value("draft"),
        draft_layers=pair_value("draft_layers"),
        dtype=pair_value("dtype"),
        device=pair_value("device"),
        data=data_files,
        n=task_value("n_eval"),
        max_new=task_value("max_new_tokens"),
        experiment=EXPERIMENT,
        run_dir=lambda wildcards, output: os.path.dirname(output.manifest),
    threads: all_cores
    resources:
        gpu=gpus,
    log:
        "logs/decode/{pair}/{task}/{baseline}/T{T}-s{seed}.log",
    conda:
        "../../environment.yml"
    shell:
        "diversed generate --target {params.target} --draft {params.draft} --draft-layers {params.draft_layers} "
        "--dtype {params.dtype} --device {params.device} --verifier {wildcards.baseline} --task {wildcards.task} "
        "{params.data} -n {params.n} --max-new-tokens {params.max_new} --temperature {wildcards.T} "
        "--seed {wildcards.seed} --run-dir {params.run_dir} --label pair={wildcards.pair} "
        "--label task={wildcards.task} --label method={wildcards.baseline} --label experiment={params.experiment} "
        "> {log} 2>&1"


rule score:
    """Quality of one run through lm-eval, replaying its stored generations (CPU; no decoding)."""
    input:
        manifest="results/runs/{run}/manifest.json",
    output:
        scores="results/runs/{run}/scores.json",
    params:
        run_dir=lambda wildcards, input: os.path.dirname(input.manifest),
    threads: 1
    log:
        "logs/score/{run}.log",
    conda:
        "../../environment.yml"
    shell:
        "diversed score {params.run_dir} > {log} 2>&1"
