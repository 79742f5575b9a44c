// Package config defines the fleetwatch configuration file: its schema, its defaults and
// its validation. Load reads it with viper, the file first, then FLEETWATCH_* environment
// variables, then flags. Validation reports every problem at once, each naming the key.
//
// This package starts nothing.
package config
