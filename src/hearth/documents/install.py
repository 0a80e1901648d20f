"""What Hearth installs for documents when it starts: the pipeline's task types, its workflow definition
(``document-pipeline``, a new version only when ``pipeline.yaml`` changed) and the extraction prompt
(``financial_kpi_extraction``, version 1, created only when the code does not exist: an operator's versions are
never touched)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.documents.financial_schema import FINANCIAL_KPI_SCHEMA, PROMPT_EN, PROMPT_ZH
from hearth.documents.jobs import EXTRACTION_PROMPT, pipeline_definition
from hearth.errors import HearthError
from hearth.observability.logging import get_logger
from hearth.prompts.spec import PromptCreate
from hearth.prompts.store import create_version, get_prompt
from hearth.tasks.types import TaskTypes
from hearth.workflows.definition_store import DefinitionStore

log = get_logger("hearth.documents")


async def install_pipeline(engine: AsyncEngine, definitions: DefinitionStore, types: TaskTypes) -> None:
    row, created = await definitions.register(pipeline_definition(), known_task_types=types.names())
    if created:
        log.info("document_pipeline_registered", version=row["version"])
    try:
        await get_prompt(engine, EXTRACTION_PROMPT)
    except HearthError:
        await create_version(engine, PromptCreate(
            code=EXTRACTION_PROMPT, display_name="Financial report KPIs",
            description="The document pipeline's extraction: revenue, net income, operating cash flow, EPS and risk "
                        "factors, each value with its source page and quote.",
            contents={"en": PROMPT_EN, "zh": PROMPT_ZH}, output_schema=FINANCIAL_KPI_SCHEMA,
            operator="hearth", reason="shipped with Hearth"))
        log.info("document_prompt_installed", code=EXTRACTION_PROMPT)
