"""One module per transformation: partial_eval (staging, DCE), lowering (StableHLO)."""
