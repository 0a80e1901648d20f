"""Image generation (docs/images.md): the sizes an ``images`` endpoint can draw (``endpoints.image_sizes``,
NULL: any size) and a price per generated image (``prices.per_image``, NULL: none).

Revision ID: 0032
Revises: 0031
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("endpoints") as batch:
        batch.add_column(sa.Column("image_sizes", sa.JSON, nullable=True))
    with op.batch_alter_table("prices") as batch:
        batch.add_column(sa.Column("per_image", sa.Float, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("prices") as batch:
        batch.drop_column("per_image")
    with op.batch_alter_table("endpoints") as batch:
        batch.drop_column("image_sizes")
