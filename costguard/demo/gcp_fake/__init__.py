"""Local fakes of the Compute Engine REST API and Cloud Monitoring, served over HTTP so
google-cloud-compute and the Monitoring client talk to them as to Google (`server.FakeGcp`)."""
