"""Adapters that put toolgym's losses and environments inside other training frameworks.

Each submodule imports its framework on import (``toolgym.integrations.trl`` needs ``pip install
toolgym[trl]``); ``import toolgym`` never loads them.
"""
