"""The fleet keeps what clients that cannot be located get (``unlocated_clients``).

The default, ``unrestricted``, is what such clients got before: no residency rule applies.
"""

from django.db import migrations, models

import regions.models.fleet


class Migration(migrations.Migration):
    dependencies = [
        ("regions", "0006_client_role_and_tenant"),
    ]

    operations = [
        migrations.AddField(
            model_name="fleetsettings",
            name="unlocated_clients",
            field=models.CharField(
                default="unrestricted",
                help_text="unrestricted, deny, rule:NAME (a residency rule) or zone:CODE",
                max_length=80,
                validators=[regions.models.fleet.validate_unlocated],
            ),
        ),
    ]
