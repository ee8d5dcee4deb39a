"""The training step: :class:`~slca_lightning.training.module.SLCAGRPOModule` (the
LightningModule), the policy update it owns (:mod:`.update`), the loss with its terms
(:mod:`.losses`), checkpoints without the frozen reference (:mod:`.reference`) and loading
checkpoints safely (:mod:`.checkpoints`)."""
