"""Table history as ``json`` with lz4 compression on PostgreSQL (see ``DocumentField``)."""

from django.db import DatabaseError, migrations, transaction

import regions.models

COLUMNS = ("table", "diff")


def lz4_compression(apps, schema_editor):  # noqa: ANN001, ANN201 - migration signature
    """Compress the history's documents with lz4 where the server was built with it.

    PostgreSQL's default (pglz) costs more CPU per insert than parsing the document; a server
    without lz4 keeps the default and the migration still applies.
    """
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    table = schema_editor.quote_name("regions_routingtableversion")
    for column in COLUMNS:
        try:
            with transaction.atomic(using=connection.alias):
                schema_editor.execute(
                    f"ALTER TABLE {table} ALTER COLUMN {schema_editor.quote_name(column)} "
                    "SET COMPRESSION lz4"
                )
        except DatabaseError:
            return


class Migration(migrations.Migration):
    dependencies = [
        ("regions", "0002_heartbeat_sample"),
    ]

    operations = [
        migrations.AlterField(
            model_name="routingtableversion",
            name="diff",
            field=regions.models.DocumentField(blank=True, default=dict),
        ),
        migrations.AlterField(
            model_name="routingtableversion",
            name="table",
            field=regions.models.DocumentField(),
        ),
        migrations.RunPython(lz4_compression, migrations.RunPython.noop),
    ]
