"""What one round passes to the next: each trajectory compacted to its conclusion, the conclusions rendered
into the paper's synthesis prompt (the last user message replaced), fitted into the model's context window,
measured in tokens."""
