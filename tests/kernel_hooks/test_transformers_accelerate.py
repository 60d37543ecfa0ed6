"""A modern GPU notebook comes back working: a ``transformers.Trainer`` trained half way, a
``pipeline``, and an ``accelerate.Accelerator`` with its prepared model, optimizer, scheduler
and DataLoader.

They hold what a pickle could not take before: weak references (torch's LRScheduler wraps the
optimizer's ``step`` with one to the optimizer; accelerate's ``GradientState`` keeps its
DataLoaders by weak reference) and accelerate's shared-state singletons (every instance of
``PartialState``, ``AcceleratorState`` and ``GradientState`` shares one class-level dict), see
:mod:`kernel_hooks.codecs.weak_references` and :mod:`kernel_hooks.codecs.shared_state`. Each
test builds them in one kernel, saves, restores in a fresh kernel and uses them there; the
saving kernel runs the same cells after the save, as an uninterrupted run, and the two must
agree. The models are tiny ones made from a config, the data and the tokenizer are made in
the cell: nothing is downloaded. Each runs on the CPU and, marked ``gpu``, on a GPU.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from kernel_processes import Kernel, KernelFactory

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=[pytest.mark.gpu,
                                pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]),
]

DETERMINISTIC = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
"""What cuBLAS needs, before CUDA starts, for ``torch.use_deterministic_algorithms``: the cells
compare float results of two kernels bit for bit."""

TRAINER = """
import hashlib, torch, transformers
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (BertConfig, BertForSequenceClassification, GPT2Config, GPT2LMHeadModel,
                          PreTrainedTokenizerFast, Trainer, TrainerCallback, TrainingArguments, pipeline)

class Tokens(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        self.ids = torch.randint(0, 100, (n, 8), generator=torch.Generator().manual_seed(seed))
    def __len__(self):
        return len(self.ids)
    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}

class StopAt(TrainerCallback):
    def __init__(self, step):
        self.step = step
    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            control.should_training_stop = True

torch.use_deterministic_algorithms(True, warn_only=True)  # on a GPU, the same sums in every kernel
transformers.set_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=100, n_positions=16))
args = TrainingArguments(output_dir="trainer-out", report_to=[], max_steps=8, use_cpu=USE_CPU,
                         per_device_train_batch_size=4, logging_steps=1, save_strategy="steps", save_steps=4,
                         seed=0, disable_tqdm=True)
trainer = Trainer(model=model, args=args, train_dataset=Tokens(32, 1), eval_dataset=Tokens(8, 2),
                  callbacks=[StopAt(4)])
trainer.train()

words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "cat", "sat", "on", "mat", "dog"]
tokens = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
tokens.pre_tokenizer = pre_tokenizers.Whitespace()
tokenizer = PreTrainedTokenizerFast(tokenizer_object=tokens, unk_token="[UNK]", pad_token="[PAD]",
                                    cls_token="[CLS]", sep_token="[SEP]")
classifier = BertForSequenceClassification(BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                                      intermediate_size=37, vocab_size=len(words), num_labels=3))
classify = pipeline("text-classification", model=classifier, tokenizer=tokenizer, top_k=None, device="DEVICE")
"""

# the same cells in both kernels once saved: the saving kernel is the uninterrupted run
TRAINER_AFTER = [
    "evaluated = trainer.evaluate()['eval_loss']",
    # more steps with the Trainer's own optimizer, scheduler and accelerator, kept from train()
    """
batch = {k: v.to(trainer.args.device) for k, v in trainer.data_collator([trainer.train_dataset[i] for i in range(4)]).items()}
stepped = []
for _ in range(2):
    stepped.append(trainer.training_step(trainer.model, batch).item())
    trainer.optimizer.step(); trainer.lr_scheduler.step(); trainer.optimizer.zero_grad()
stepped.append(trainer.lr_scheduler.get_last_lr())
digest = lambda m: hashlib.sha256(b''.join(p.detach().cpu().numpy().tobytes() for p in m.parameters())).hexdigest()
stepped.append(digest(trainer.model))
""",
    # and the Trainer's own way on: resume from the checkpoint its first train() wrote at step 4
    """
trainer.train(resume_from_checkpoint="trainer-out/checkpoint-4")
resumed = ([e["loss"] for e in trainer.state.log_history if "loss" in e][-4:], trainer.state.global_step,
           digest(trainer.model))
""",
    "labels = classify(['the cat sat on the mat', 'the dog'])",
]
TRAINER_RESULT = "(evaluated, stepped, resumed, labels)"


@pytest.fixture(scope="module", params=DEVICES)
def trained(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[Kernel, Any, str]]:
    device = request.param
    factory = KernelFactory(tmp_path_factory.mktemp(f"trainer-{device}"))
    try:
        saver = factory.start(**DETERMINISTIC)
        saver.ok(TRAINER.replace("USE_CPU", str(device == "cpu")).replace("DEVICE", device), timeout=300)
        out = saver.ok("%gpuckpt save")
        assert "Not saved" not in out, out
        checkpoint = out.strip().splitlines()[-1]
        for cell in TRAINER_AFTER:
            saver.ok(cell, timeout=300)
        uninterrupted = saver.value(TRAINER_RESULT)
        restorer = factory.start(**DETERMINISTIC)
        report = restorer.ok(f"%gpuckpt restore {checkpoint}", timeout=300)
        assert "Not restored" not in report and "Cells to re-run" not in report, report
        yield restorer, uninterrupted, device
    finally:
        factory.close()


def test_a_trainer_comes_back_with_its_accelerator_and_continues_as_uninterrupted(
        trained: tuple[Kernel, Any, str]) -> None:
    kernel, uninterrupted, device = trained
    assert kernel.value("(type(trainer).__name__, trainer.state.global_step, [type(c).__name__ for c in "
                        "trainer.callback_handler.callbacks].count('StopAt'), trainer.model.device.type)") == (
        "Trainer", 4, 1, device)
    # the scheduler wrapped the optimizer's step with a weak reference to it: to the restored one now
    assert kernel.value("(trainer.accelerator.state.initialized, "
                        "trainer.accelerator.gradient_state.__dict__ is type(trainer.accelerator.gradient_state)"
                        "._shared_state, trainer.lr_scheduler.optimizer is trainer.optimizer, "
                        "dict(zip(trainer.optimizer.step.__code__.co_freevars, trainer.optimizer.step.__closure__))"
                        "['opt_ref'].cell_contents() is trainer.optimizer)") == (
        True, True, True, True)
    for cell in TRAINER_AFTER:
        kernel.ok(cell, timeout=300)
    assert kernel.value(TRAINER_RESULT) == uninterrupted
    assert uninterrupted[2][1] == 8 and len(uninterrupted[3]) == 2


ACCELERATOR = """
import hashlib, torch, accelerate
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState, PartialState
torch.use_deterministic_algorithms(True, warn_only=True)
accelerate.utils.set_seed(0)
accelerator = Accelerator(cpu=CPU, gradient_accumulation_steps=2)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt = torch.optim.AdamW(model.parameters(), lr=0.01)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 1)),
                                     batch_size=8, shuffle=True)
model, opt, sched, loader = accelerator.prepare(model, opt, sched, loader)
losses = []
def epoch(batches=None):
    for i, (x, y) in enumerate(loader):
        if i == batches:
            break  # left part-way, as a Trainer with max_steps leaves it: GradientState keeps the loader
        with accelerator.accumulate(model):
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            opt.step(); sched.step(); opt.zero_grad()
            losses.append(loss.item())
epoch(); epoch(batches=5)
"""
ACCELERATOR_RESULT = ("(losses, sched.get_last_lr(), "
                      "hashlib.sha256(b''.join(p.detach().cpu().numpy().tobytes() for p in model.parameters()))"
                      ".hexdigest())")


@pytest.mark.parametrize("device", DEVICES)
def test_an_accelerator_comes_back_initialized_and_trains_on_as_uninterrupted(kernels: KernelFactory,
                                                                             device: str) -> None:
    saver = kernels.start(**DETERMINISTIC)
    saver.ok(ACCELERATOR.replace("CPU", str(device == "cpu")), timeout=300)
    checkpoint = saver.save()
    saver.ok("epoch()")
    uninterrupted = saver.value(ACCELERATOR_RESULT)

    restorer = kernels.start(**DETERMINISTIC)
    # an Accelerator made otherwise before the restore: the checkpoint's shared state wins, for it too
    restorer.ok("from accelerate import Accelerator; early = Accelerator(cpu=False, gradient_accumulation_steps=4)")
    report = restorer.ok(f"%gpuckpt restore {checkpoint}", timeout=300)
    assert "Not restored" not in report, report
    assert restorer.value("(AcceleratorState().initialized, accelerator.state.__dict__ is "
                          "AcceleratorState._shared_state, accelerator.gradient_state.__dict__ is "
                          "GradientState._shared_state, early.gradient_state.num_steps, accelerator.device.type)") == (
        True, True, True, 2, device)
    # PartialState's, which AcceleratorState() copies over its own, is the checkpoint's too
    assert restorer.value("(PartialState()._cpu, AcceleratorState()._cpu, early.state._cpu)") == (
        (device == "cpu",) * 3)
    # the scheduler's optimizer is the restored one, and GradientState's weak reference is to the restored loader
    assert restorer.value("(sched.scheduler.optimizer is opt.optimizer, sched.optimizers == [opt], "
                          "opt.optimizer.param_groups[0]['params'][0] is next(model.parameters()), "
                          "GradientState().active_dataloader is loader)") == (True, True, True, True)
    restorer.ok("epoch()")
    assert restorer.value(ACCELERATOR_RESULT) == uninterrupted
