"""The policy: loading it (:mod:`.load`), LoRA adapters (:mod:`.lora`) and the tiny demo model (:mod:`.demo`)."""
