"""Residency rules name country sets (``EEA``, ``ASEAN``, ...); the fleet keeps its ``slo``.

Both are new columns with defaults that mean "as before": no set, the default objective.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("regions", "0004_loop_state_event_uid"),
    ]

    operations = [
        migrations.AddField(
            model_name="residencyrule",
            name="sets",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name="fleetsettings",
            name="slo",
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
