// Package config defines the configuration of the fleetwatch daemon: the schema of its
// config file (Config, whose keys are a contract documented in docs/config.md), the
// defaults (Default, DefaultResources), the validation (Config.Validate), and the
// loading (Load).
//
// Load reads up to three layers over the defaults, each replacing what the one below
// sets, key by key: the YAML config file, then FLEETWATCH_* environment variables, then
// the flags set on the command line. The file is checked node by node against the
// schema, so that an unknown key or a value of the wrong type is reported with its line;
// viper then merges the layers and decodes them into a Config. Every problem is reported
// at once, as a *FieldError naming the key and where its value came from.
//
// BindFlags defines one flag per key, derived from the same schema as the environment
// variables, so that package main only owns the FlagSet and stays thin.
//
// A Config holds no secrets, only the paths of files that hold them, and String is safe
// to log. This package reads the config file and nothing else: it starts nothing and
// opens none of the files that a Config names.
//
// A rule or a default that the library has is not written again here: the resources are
// checked by informer.ValidateResources, the globs by cluster.ValidateGlob, the host
// patterns by server.ValidateHostPattern, and the defaults of the keys that the library
// also has are its constants. For those, it imports cluster, informer, persist and
// server, none of which imports it; it must not import the root package fleetwatch,
// which runs what a Config describes.
package config
