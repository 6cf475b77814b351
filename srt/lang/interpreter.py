"""Executes a program's expressions: one worker thread per state (`StreamExecutor`).

The program's Python runs in the caller's thread and only queues expressions; the
worker runs them in order against the backend. So the branches of a fork generate
concurrently (the server batches them), and reading a variable (`s["x"]`) waits for
the expressions queued before it.
"""

from __future__ import annotations

import copy
import queue
import threading
from typing import Any, Iterator, Optional

from radixlm.lang.chat_template import ChatTemplate
from radixlm.lang.ir import (
    SglConstantText, SglExpr, SglExprList, SglGen, SglRoleBegin, SglRoleEnd, SglSamplingParams,
    SglSelect,
)


class ProgramError(RuntimeError):
    """A variable was read from a state whose program failed before producing it."""


class StreamExecutor:
    def __init__(self, backend: Any, default_sampling: SglSamplingParams, stream: bool = False) -> None:
        self.backend = backend
        self.default_sampling = default_sampling
        self.stream = stream
        self.chat_template: Optional[ChatTemplate] = None
        self.text_ = ""
        self.messages_: list[dict[str, str]] = []
        self.variables: dict[str, Any] = {}
        self.meta_info: dict[str, Any] = {}
        self.cur_role: Optional[str] = None
        self.cur_role_begin_pos = 0
        self.error_: Optional[BaseException] = None
        self.done_vars: set[str] = set()
        self.finished = False
        self.fork_point = 0  # len(text_) when this state was forked from its parent
        self.fork_vars: dict[str, Any] = {}
        self.fork_prefix_meta: Optional[dict[str, Any]] = None  # meta of the last fork's prefill
        self.branches: list["StreamExecutor"] = []  # ended with this state if never joined
        self.cond = threading.Condition()
        self.queue: "queue.Queue[Optional[SglExpr]]" = queue.Queue()
        self.worker: Optional[threading.Thread] = None

    # ---- queueing ----
    def submit(self, expr: SglExpr) -> None:
        if self.finished:
            raise RuntimeError("this program state has finished; run a new program to extend it")
        if self.worker is None:
            self.worker = threading.Thread(target=self._loop, daemon=True, name="radixlm-lang-state")
            self.worker.start()
        self.queue.put(expr)

    def sync(self) -> None:
        self.queue.join()

    def end(self) -> None:
        """Finish after the queued expressions; wakes `text_iter` readers."""
        self.sync()
        for branch in self.branches:
            branch.end()
        self.branches = []
        if self.worker is not None:
            self.queue.put(None)
        with self.cond:
            self.finished = True
            self.cond.notify_all()

    def set_error(self, error: BaseException) -> None:
        with self.cond:
            self.error_ = self.error_ or error
            self.cond.notify_all()

    def _loop(self) -> None:
        while True:
            expr = self.queue.get()
            try:
                if expr is None:
                    return
                if self.error_ is None:
                    self.execute(expr)
            except Exception as e:  # the program's failure is data for its state
                self.set_error(e)
            finally:
                self.queue.task_done()

    # ---- expressions ----
    def execute(self, expr: SglExpr) -> None:
        if isinstance(expr, SglExprList):
            for e in expr.exprs:
                self.execute(e)
        elif isinstance(expr, SglConstantText):
            self.append(expr.value)
        elif isinstance(expr, SglRoleBegin):
            self._role_begin(expr.role)
        elif isinstance(expr, SglRoleEnd):
            self._role_end(expr.role)
        elif isinstance(expr, SglGen):
            self._gen(expr)
        elif isinstance(expr, SglSelect):
            self._select(expr)
        else:
            raise TypeError(f"unknown expression {type(expr).__name__}")

    def append(self, text: str, var: Optional[str] = None) -> None:
        with self.cond:
            self.text_ += text
            if var is not None:
                self.variables[var] = self.variables.get(var, "") + text
            self.cond.notify_all()

    def _template(self) -> ChatTemplate:
        if self.chat_template is None:
            self.chat_template = self.backend.get_chat_template()
        return self.chat_template

    def _role_begin(self, role: str) -> None:
        tmpl = self._template()
        if self.cur_role is not None:
            raise ValueError(f"role {role!r} begins inside the open role {self.cur_role!r}")
        if not self.messages_ and not self.text_:
            self.append(tmpl.begin_of_text)
        if not self.messages_ and role != "system" and tmpl.default_system_prompt is not None:
            self.append(tmpl.prefix("system") + tmpl.default_system_prompt + tmpl.suffix("system"))
            self.messages_.append({"role": "system", "content": tmpl.default_system_prompt})
        self.append(tmpl.prefix(role))
        self.cur_role, self.cur_role_begin_pos = role, len(self.text_)

    def _role_end(self, role: str) -> None:
        if self.cur_role != role:
            raise ValueError(f"role {role!r} ends but the open role is {self.cur_role!r}")
        content = self.text_[self.cur_role_begin_pos:]
        self.append(self._template().suffix(role))
        self.messages_.append({"role": role, "content": content})
        self.cur_role = None

    def _gen(self, expr: SglGen) -> None:
        params = expr.sampling_params.merged_over(self.default_sampling)
        logprob_args = _logprob_args(expr)
        name = expr.name if expr.name is not None else f"_anonymous_{id(expr)}"
        self.variables[name] = ""
        if self.stream:
            meta = None
            for delta, chunk_meta in self.backend.generate_stream(self.text_, params, **logprob_args):
                self.append(delta, var=name)
                meta = chunk_meta or meta
        else:
            text, meta = self.backend.generate(self.text_, params, **logprob_args)
            self.append(text, var=name)
        self._finish_var(name, meta)

    def _select(self, expr: SglSelect) -> None:
        decision = self.backend.select(self.text_, expr.choices, expr.choices_method)
        name = expr.name if expr.name is not None else f"_anonymous_{id(expr)}"
        self.append(decision.decision)
        self.variables[name] = decision.decision
        self._finish_var(name, decision.meta_info)

    def _finish_var(self, name: str, meta: Optional[dict[str, Any]]) -> None:
        with self.cond:
            self.meta_info[name] = meta
            self.done_vars.add(name)
            self.cond.notify_all()

    # ---- reading ----
    def get_var(self, name: str) -> Any:
        self.sync()
        if name in self.variables:
            return self.variables[name]
        if self.error_ is not None:
            raise ProgramError(f"variable {name!r} was not produced: {self.error_!r}") from self.error_
        raise KeyError(name)

    def set_var(self, name: str, value: Any) -> None:
        self.sync()
        self.variables[name] = value

    def text_iter(self, var_name: Optional[str] = None) -> Iterator[str]:
        """Yield new text (of the whole state, or of one variable) as it is generated."""
        pos = 0
        while True:
            with self.cond:
                self.cond.wait_for(lambda: len(self._stream_source(var_name)) > pos or self._stream_over(var_name))
                over = self._stream_over(var_name)
                source = self._stream_source(var_name)
                chunk, pos = source[pos:], len(source)
            if chunk:
                yield chunk
            if over:
                break
        if self.error_ is not None:
            raise ProgramError(f"the program failed: {self.error_!r}") from self.error_

    def _stream_source(self, var_name: Optional[str]) -> str:
        if var_name is None:
            return self.text_
        value = self.variables.get(var_name, "")
        return value if isinstance(value, str) else ""

    def _stream_over(self, var_name: Optional[str]) -> bool:
        return self.finished or self.error_ is not None or (var_name is not None and var_name in self.done_vars)

    # ---- fork / join ----
    def fork(self, n: int) -> list["StreamExecutor"]:
        """Copies of this state; with n > 1 the shared prefix is prefilled once first."""
        self.sync()
        if self.error_ is not None:
            raise ProgramError(f"cannot fork a failed state: {self.error_!r}") from self.error_
        if n > 1 and self.text_.strip():
            # Trailing whitespace may merge with what a branch appends ("\n\n" vs "\n\nNow"),
            # so the prefix is cached without it: every branch then matches all of it.
            self.fork_prefix_meta = self.backend.cache_prefix(self.text_.rstrip())
        branches = [self._branch() for _ in range(n)]
        self.branches.extend(branches)
        return branches

    def _branch(self) -> "StreamExecutor":
        child = StreamExecutor(self.backend, self.default_sampling, self.stream)
        child.chat_template = self.chat_template
        child.text_, child.messages_ = self.text_, copy.deepcopy(self.messages_)
        child.variables, child.meta_info = dict(self.variables), dict(self.meta_info)
        child.cur_role, child.cur_role_begin_pos = self.cur_role, self.cur_role_begin_pos
        child.fork_point, child.fork_vars = len(self.text_), dict(self.variables)
        return child

    def new_variable_names(self) -> list[str]:
        """Variables set or replaced since this branch was forked, in creation order."""
        return [k for k, v in self.variables.items()
                if not k.startswith("_anonymous_") and (k not in self.fork_vars or self.fork_vars[k] is not v)]

    def join(self, branches: list["StreamExecutor"], mode: str) -> None:
        for b in branches:
            b.sync()
        failed = next((b.error_ for b in branches if b.error_ is not None), None)
        if failed is not None:
            raise ProgramError(f"a forked branch failed: {failed!r}") from failed
        self.sync()
        if mode == "gather_variable":
            names = list(dict.fromkeys(n for b in branches for n in b.new_variable_names()))
            for name in names:
                self.variables[name] = [b.variables.get(name) for b in branches]
                self.meta_info[name] = [b.meta_info.get(name) for b in branches]
        elif mode == "concate_and_append":
            self.append("".join(b.text_[b.fork_point:] for b in branches))
        else:
            raise ValueError(f"unknown join mode {mode!r}; use 'gather_variable' or 'concate_and_append'")
        for b in branches:
            b.end()
        self.branches = [b for b in self.branches if b not in branches]


def _logprob_args(expr: SglGen) -> dict[str, Any]:
    if not expr.return_logprob:
        return {}
    args: dict[str, Any] = {"return_logprob": True, "return_text_in_logprobs": expr.return_text_in_logprobs}
    if expr.logprob_start_len is not None:
        args["logprob_start_len"] = expr.logprob_start_len
    if expr.top_logprobs_num is not None:
        args["top_logprobs_num"] = expr.top_logprobs_num
    return args
