"""`providers.aws` settings: clear errors for bad input, secrets kept out of reprs."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from costguard.config import load_settings
from costguard.errors import ConfigError
from costguard.providers.aws import AwsAccount, AwsSettings


def test_defaults_read_every_region_of_the_ambient_account() -> None:
    s = AwsSettings()

    assert s.regions == "all" and s.accounts == [] and s.role_name == "CostguardRole"
    assert s.max_workers == 8 and s.cloudwatch.gpu_namespace == "CWAgent"
    assert s.cloudwatch.instance_dimension == "auto"


def test_an_unquoted_twelve_digit_account_id_is_read_as_text() -> None:
    assert AwsAccount(id=123456789012).id == "123456789012"


@pytest.mark.parametrize("number", [12345678901, 1402433619, 12])
def test_a_shorter_number_is_refused_not_padded_into_another_account(number: int) -> None:
    # YAML reads `id: 012345670123` as the octal 1402433619: padding it with zeros governed
    # account 001402433619; an 11-digit number may be that or a lost leading zero
    with pytest.raises(ValidationError, match="quote it: id: '012345678901'"):
        AwsAccount(id=number)


def test_the_octal_reading_is_caught_from_the_file(tmp_path: Path) -> None:
    cfg = tmp_path / "costguard.yaml"
    cfg.write_text("providers:\n  aws:\n    accounts:\n      - {id: 012345670123}\n")
    with pytest.raises(ConfigError, match=r"costguard.yaml:4:14: providers.aws.accounts\[0\]"
                                          r".id: AWS account id 1402433619 is a number"):
        load_settings(cfg)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"accounts": [{"id": "1234"}]}, "must be 12 digits"),
        (
            {"accounts": [{"id": "111111111111", "role_arn": "CostguardRole"}]},
            "not an IAM role ARN",
        ),
        ({"regions": ["us-east-1", "virginia"]}, "not AWS region names: virginia"),
        ({"regions": []}, 'or write "all"'),
        ({"discover_accounts": "ldap"}, "organizations"),
        ({"cloudwatch": {"namespace": "CWAgent"}}, "Extra inputs are not permitted"),
        ({"region": "us-east-1"}, "Extra inputs are not permitted"),
        ({"accounts": [{"id": "111111111111"}, {"id": "111111111111"}]}, "more than once"),
    ],
)
def test_bad_settings_say_what_to_fix(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError) as err:
        AwsSettings(**settings)

    assert message in str(err.value)


def test_external_id_never_shows_in_repr_or_dump() -> None:
    s = AwsSettings(external_id="very-secret-id")

    assert "very-secret-id" not in repr(s)
    assert "very-secret-id" not in s.model_dump_json()
    assert s.external_id is not None and s.external_id.get_secret_value() == "very-secret-id"


def test_role_arn_defaults_to_role_name_in_the_account() -> None:
    s = AwsSettings(role_name="Finops")

    assert s.role_arn_for(AwsAccount(id="111111111111")) == "arn:aws:iam::111111111111:role/Finops"
    custom = AwsAccount(id="111111111111", role_arn="arn:aws:iam::111111111111:role/x/Other")
    assert s.role_arn_for(custom) == custom.role_arn
