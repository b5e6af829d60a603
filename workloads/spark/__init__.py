"""PySpark applications: the MQTT streaming source and sinks, the RIoTBench apps, state handoff."""
