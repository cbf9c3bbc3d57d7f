"""lmms-eval 0.7.3, the peer our metrics are compared with: its modules as the parity checks import
them (`fastmmeval.parity.peer`), for the tests that call its functions directly."""

from fastmmeval.parity.peer import VERSION, lmms_eval_module

__all__ = ["VERSION", "lmms_eval_module"]
