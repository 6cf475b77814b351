"""`ProgramState` (the `s` a program appends to) and the group of states a fork returns."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Optional, Union

from radixlm.lang.interpreter import StreamExecutor
from radixlm.lang.ir import ExprLike, SglRoleBegin, SglRoleEnd, role_expr, to_expr


class ProgramState:
    def __init__(self, stream_executor: StreamExecutor) -> None:
        self.stream_executor = stream_executor

    # ---- building ----
    def __iadd__(self, other: ExprLike) -> "ProgramState":
        self.stream_executor.submit(to_expr(other))
        return self

    def system(self, expr: Optional[ExprLike] = None):
        return self._role("system", expr)

    def user(self, expr: Optional[ExprLike] = None):
        return self._role("user", expr)

    def assistant(self, expr: Optional[ExprLike] = None):
        return self._role("assistant", expr)

    def _role(self, role: str, expr: Optional[ExprLike]):
        """With `expr`, append it as one turn; without, a context manager (`with s.user():`)."""
        if expr is not None:
            self.stream_executor.submit(role_expr(role, expr))
            return self
        return self._role_scope(role)

    @contextmanager
    def _role_scope(self, role: str) -> Iterator["ProgramState"]:
        self.stream_executor.submit(SglRoleBegin(role))
        yield self
        self.stream_executor.submit(SglRoleEnd(role))

    def fork(self, size: int = 1) -> "ProgramStateGroup":
        branches = self.stream_executor.fork(size)
        return ProgramStateGroup([ProgramState(b) for b in branches], self)

    # ---- reading ----
    def __getitem__(self, name: str) -> Any:
        return self.stream_executor.get_var(name)

    def __setitem__(self, name: str, value: Any) -> None:
        self.stream_executor.set_var(name, value)

    def __contains__(self, name: str) -> bool:
        self.sync()
        return name in self.stream_executor.variables

    def get_var(self, name: str) -> Any:
        return self.stream_executor.get_var(name)

    def set_var(self, name: str, value: Any) -> None:
        self.stream_executor.set_var(name, value)

    def text(self) -> str:
        self.sync()
        return self.stream_executor.text_

    def messages(self) -> list[dict[str, str]]:
        self.sync()
        return [dict(m) for m in self.stream_executor.messages_]

    def get_meta_info(self, name: str) -> Optional[dict[str, Any]]:
        """The server's meta_info for the generation that set `name` (a list after a join)."""
        self.sync()
        return self.stream_executor.meta_info.get(name)

    def text_iter(self, var_name: Optional[str] = None) -> Iterator[str]:
        return self.stream_executor.text_iter(var_name)

    def sync(self) -> None:
        self.stream_executor.sync()

    def error(self) -> Optional[BaseException]:
        """The exception that stopped this program, or None."""
        self.sync()
        return self.stream_executor.error_

    def __repr__(self) -> str:
        return f"ProgramState({self.text()!r})"


class ProgramStateGroup:
    """The branches of `s.fork(n)`; `join()` gathers their new variables into the parent."""

    def __init__(self, states: list[ProgramState], parent: ProgramState) -> None:
        self.states = states
        self.parent = parent

    def __len__(self) -> int:
        return len(self.states)

    def __iter__(self) -> Iterator[ProgramState]:
        return iter(self.states)

    def __getitem__(self, i: int) -> ProgramState:
        return self.states[i]

    def __iadd__(self, other: Union[ExprLike, list[ExprLike], tuple[ExprLike, ...]]) -> "ProgramStateGroup":
        """Append one expression to every branch, or the i-th of a list to branch i."""
        if isinstance(other, (list, tuple)):
            if len(other) != len(self.states):
                raise ValueError(f"{len(other)} expressions for {len(self.states)} branches")
            for state, expr in zip(self.states, other):
                state += expr
        else:
            for state in self.states:
                state += other
        return self

    def join(self, mode: str = "gather_variable") -> None:
        """Wait for every branch; then each variable a branch set becomes a list in the parent
        ("gather_variable"), or the branches' new text is appended ("concate_and_append")."""
        self.parent.stream_executor.join([s.stream_executor for s in self.states], mode)
