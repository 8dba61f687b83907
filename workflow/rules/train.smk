rule train_head:
    """The DIVERSED weight head for one task (REINFORCE; resumable from its checkpoint) at the config's lambda; a
    task of lambda_sweep gets its head from sweep_lambda instead."""
    wildcard_constraints:
        task=one_of([t for t in TASKS if t not in LAMBDA_TASKS]),
    input:
        unpack(models),
    output:
        head="results/heads/{pair}/{task}/head.safetensors",
        log_csv="results/heads/{pair}/{task}/train_log.csv",
    params:
        target=pair_value("target"),
        draft=pair_value("draft"),
        draft_layers=pair_value("draft_layers"),
        dtype=pair_value("dtype"),
        device=pair_value("device"),
        data=data_files,
        n_train=task_value("n_train"),
        max_new=config["train_head"]["max_new_tokens"],
        epochs=config["train_head"]["epochs"],
        batch_size=config["train_head"]["batch_size"],
        lr=config["train_head"]["lr"],
        acceptance_term=config["train_head"]["acceptance_term"],
        acceptance_weight=config["train_head"]["acceptance_weight"],
        prompt_format=config["prompt_format"],
        rollout=config["train_head"]["rollout"],
        temperature=config["train_head"]["temperature"],
        mixing=config["train_head"]["mixing"],
        reward=config["train_head"]["reward"],
        execution=EXECUTION,
        out=lambda wildcards, output: os.path.dirname(output.head),
    threads: job_threads
    resources:
        gpu=gpus,
    log:
        "logs/train_head/{pair}/{task}.log",
    conda:
        "../../environment.yml"
    shell:
        "OMP_NUM_THREADS={threads} WANDB_MODE=${{WANDB_MODE:-offline}} HF_HUB_OFFLINE=1 "  # torch's threads; no network
        "diversed train head --target {params.target} --draft {params.draft} --draft-layers {params.draft_layers} "
        "--dtype {params.dtype} --device {params.device} --task {wildcards.task} {params.data} "
        "--n-train {params.n_train} --max-new-tokens {params.max_new} --seed 0 --epochs {params.epochs} "
        "--batch-size {params.batch_size} --lr {params.lr} --acceptance-term {params.acceptance_term} "
        "--acceptance-weight {params.acceptance_weight} --prompt-format {params.prompt_format} "
        "--rollout {params.rollout} --temperature {params.temperature} --mixing {params.mixing} "
        "--reward {params.reward} {params.execution} --out {params.out} > {log} 2>&1"


rule distill_draft:
    """The fine-tuned-draft baseline: the draft fine-tuned on the task's training prompts (distill: toward the
    target's own text; sft: on the reference answers)."""
    input:
        unpack(models),
    output:
        draft=directory("resources/drafts/{pair}/{task}"),
    params:
        target=pair_value("target"),
        draft=pair_value("draft"),
        draft_layers=pair_value("draft_layers"),
        dtype=pair_value("dtype"),
        device=pair_value("device"),
        data=data_files,
        n_train=task_value("n_train"),
        max_new=config["distill"]["max_new_tokens"],
        epochs=config["distill"]["epochs"],
        lr=config["distill"]["lr"],
        finetune=config["distill"]["finetune"],
        prompt_format=config["prompt_format"],
        execution=EXECUTION,
    threads: job_threads
    resources:
        gpu=gpus,
    log:
        "logs/distill_draft/{pair}/{task}.log",
    conda:
        "../../environment.yml"
    shell:
        "OMP_NUM_THREADS={threads} WANDB_MODE=${{WANDB_MODE:-offline}} HF_HUB_OFFLINE=1 "  # torch's threads; no network
        "diversed train draft --target {params.target} --draft {params.draft} --draft-layers {params.draft_layers} "
        "--dtype {params.dtype} --device {params.device} --task {wildcards.task} {params.data} "
        "--n-train {params.n_train} --max-new-tokens {params.max_new} --seed 0 --epochs {params.epochs} "
        "--lr {params.lr} --finetune {params.finetune} --prompt-format {params.prompt_format} {params.execution} "
        "--out {output.draft} > {log} 2>&1"


use rule train_head as train_head_lambda with:
    wildcard_constraints:
        task=one_of(LAMBDA_TASKS),
    output:
        head=f"{LAMBDA_HEAD}/head.safetensors",
        log_csv=f"{LAMBDA_HEAD}/train_log.csv",
    params:
        **{k: v for k, v in rules.train_head.params.items() if k not in ("acceptance_weight", "out")},
        acceptance_weight=lambda wildcards: wildcards.lam,
        out=lambda wildcards, output: os.path.dirname(output.head),
    log:
        "logs/train_head_lambda/{pair}/{task}/lambda{lam}.log",
