"""`sessionize state ...`: inspect, export, migrate, repartition and import the state of a
stopped job (docs/design.md, "State tools")."""
