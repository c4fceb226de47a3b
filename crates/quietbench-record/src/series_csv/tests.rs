use super::*;
use proptest::prelude::*;

fn auto(text: &str) -> Result<SeriesTable, CsvError> {
    parse_series_csv(text, &IndexColumn::Auto)
}

fn column(number: usize, name: &str) -> Column {
    Column {
        number,
        name: name.into(),
    }
}

#[test]
fn reads_an_index_column_and_series() {
    let t = auto("time,a,b\n2024-01-01,1.5,10\n2024-01-02,2,1e1\n").unwrap();
    assert_eq!(t.rows, 2);
    let index = t.index.as_ref().unwrap();
    assert_eq!(index.name, "time");
    assert_eq!(index.labels, vec!["2024-01-01", "2024-01-02"]);
    assert_eq!(t.series.len(), 2);
    assert_eq!(t.series[0].name, "a");
    assert_eq!(t.series[0].values, vec![1.5, 2.0]);
    assert_eq!(t.series[1].values, vec![10.0, 10.0]);
    assert_eq!(t.label(1), Some("2024-01-02"));
    assert_eq!(t.label(2), None);
}

#[test]
fn the_index_is_found_by_its_name_in_any_case_and_only_first() {
    for name in INDEX_NAMES {
        for spelt in [name.to_string(), name.to_uppercase()] {
            let t = auto(&format!("{spelt},x\nr1,1\n")).unwrap();
            assert_eq!(t.index.unwrap().name, spelt);
            assert_eq!(t.series.len(), 1);
        }
    }
    // Not first, or another name: every column is a series.
    let t = auto("x,time\n1,2\n").unwrap();
    assert!(t.index.is_none());
    assert_eq!(t.series.len(), 2);
    let t = auto("when,x\n1,2\n").unwrap();
    assert!(t.index.is_none());
    assert_eq!(t.label(0), None);
}

#[test]
fn the_index_can_be_named_or_refused() {
    let named = IndexColumn::Named("sha".into());
    let t = parse_series_csv("x,sha,y\n1,abc,2\n", &named).unwrap();
    assert_eq!(t.index.unwrap().labels, vec!["abc"]);
    assert_eq!(
        t.series.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        vec!["x", "y"]
    );
    let t = parse_series_csv("run,x\n1,2\n", &IndexColumn::None).unwrap();
    assert!(t.index.is_none());
    assert_eq!(t.series[0].values, vec![1.0]);
    let err = parse_series_csv("x,y\n1,2\n", &named).unwrap_err();
    assert!(matches!(&err, CsvError::UnknownIndex { line: 1, name, .. } if name == "sha"));
    assert!(
        err.to_string().contains(r#"the header has "x", "y""#),
        "{err}"
    );
    let err = auto("commit\nabc\n").unwrap_err();
    assert_eq!(
        err,
        CsvError::NoSeries {
            line: 1,
            name: "commit".into()
        }
    );
}

#[test]
fn quoted_fields_keep_commas_quotes_and_line_breaks() {
    let text = "\"commit\",\"p99, ms\"\n\"a,\"\"b\"\"\",\"12.5\"\n\"two\nlines\",3\n";
    let t = auto(text).unwrap();
    assert_eq!(t.series[0].name, "p99, ms");
    assert_eq!(
        t.index.as_ref().unwrap().labels,
        vec!["a,\"b\"", "two\nlines"]
    );
    assert_eq!(t.series[0].values, vec![12.5, 3.0]);
    // The line break inside quotes counts: the bad row after it is on line 5.
    let err = auto(&format!("{text}x,y\n")).unwrap_err();
    assert!(
        matches!(err, CsvError::NotANumber { line: 5, .. }),
        "{err:?}"
    );
}

#[test]
fn crlf_a_missing_last_break_blank_trailing_lines_spaces_and_a_bom_are_fine() {
    let want = auto("run,a\nr1,1\nr2,2\n").unwrap();
    for text in [
        "run,a\r\nr1,1\r\nr2,2\r\n",
        "run,a\nr1,1\nr2,2",
        "run,a\nr1,1\nr2,2\n\n\n",
        "run,a\r\nr1,1\r\nr2,2\r\n\r\n  \r\n",
        "\u{feff}run,a\nr1,1\nr2,2\n",
        " run , a\nr1, 1 \nr2,\t2\n",
        "\n\nrun,a\nr1,1\nr2,2\n",
    ] {
        assert_eq!(auto(text).unwrap(), want, "{text:?}");
    }
}

#[test]
fn empty_inputs_are_refused() {
    for text in ["", "\n", "\r\n\r\n", "\u{feff}", "  \n"] {
        assert_eq!(auto(text).unwrap_err(), CsvError::Empty, "{text:?}");
    }
    assert_eq!(auto("a,b\n").unwrap_err(), CsvError::NoRows { line: 1 });
    assert_eq!(auto("a,b\n\n\n").unwrap_err(), CsvError::NoRows { line: 1 });
    assert!(auto("").unwrap_err().to_string().contains("header line"));
}

#[test]
fn ragged_rows_name_their_line_and_counts() {
    let err = auto("a,b,c\n1,2,3\n1,2\n").unwrap_err();
    assert_eq!(
        err,
        CsvError::Ragged {
            line: 3,
            found: 2,
            expected: 3
        }
    );
    assert!(
        err.to_string()
            .starts_with("line 3: 2 fields where the header has 3")
    );
    assert!(matches!(
        auto("a\n1,2\n").unwrap_err(),
        CsvError::Ragged {
            line: 2,
            found: 2,
            expected: 1
        }
    ));
    assert!(
        auto("a,b\n1\n")
            .unwrap_err()
            .to_string()
            .contains("1 field where")
    );
}

#[test]
fn non_numbers_non_finite_and_missing_values_name_line_and_column() {
    let err = auto("run,lat\nr1,12 ms\n").unwrap_err();
    assert_eq!(
        err,
        CsvError::NotANumber {
            line: 2,
            column: column(2, "lat"),
            text: "12 ms".into()
        }
    );
    assert!(
        err.to_string()
            .starts_with(r#"line 2, column 2 ("lat"): "12 ms" is not a number"#),
        "{err}"
    );
    for bad in ["NaN", "nan", "inf", "-inf", "infinity", "1e999"] {
        let err = auto(&format!("x\n1\n{bad}\n")).unwrap_err();
        assert!(
            matches!(&err, CsvError::NotFinite { line: 3, column: c, .. } if *c == column(1, "x")),
            "{bad}: {err:?}"
        );
    }
    let err = auto("a,b\n1,\n").unwrap_err();
    assert_eq!(
        err,
        CsvError::Missing {
            line: 2,
            column: column(2, "b")
        }
    );
    assert!(err.to_string().contains("the value is missing"));
    assert!(matches!(
        auto("a,b\n\"\",1\n").unwrap_err(),
        CsvError::Missing { line: 2, .. }
    ));
    // One column: a blank line inside the data is a missing value.
    assert_eq!(
        auto("a\n1\n\n2\n").unwrap_err(),
        CsvError::Missing {
            line: 3,
            column: column(1, "a")
        }
    );
    // Labels may be anything, empty included.
    assert_eq!(auto("run,a\n,1\n").unwrap().index.unwrap().labels, vec![""]);
}

#[test]
fn a_blank_line_inside_the_data_is_refused() {
    assert_eq!(
        auto("a,b\n1,2\n\n3,4\n").unwrap_err(),
        CsvError::BlankLine { line: 3 }
    );
}

#[test]
fn header_names_must_be_there_and_distinct() {
    assert_eq!(
        auto("a,,b\n1,2,3\n").unwrap_err(),
        CsvError::EmptyName { line: 1, number: 2 }
    );
    assert_eq!(
        auto("a,\"\"\n1,2\n").unwrap_err(),
        CsvError::EmptyName { line: 1, number: 2 }
    );
    let err = auto("\na,b,a\n1,2,3\n").unwrap_err();
    assert_eq!(
        err,
        CsvError::DuplicateName {
            line: 2,
            name: "a".into(),
            first: 1,
            second: 3
        }
    );
    assert!(
        err.to_string()
            .contains("columns 1 and 3 are both named \"a\"")
    );
}

#[test]
fn quotes_out_of_place_are_refused_with_their_line() {
    assert_eq!(
        auto("a\n\"1\n2\n").unwrap_err(),
        CsvError::UnclosedQuote { line: 2 }
    );
    assert_eq!(
        auto("a,b\n1,2\"\n").unwrap_err(),
        CsvError::StrayQuote { line: 2 }
    );
    assert_eq!(
        auto("a,b\n1,\"2\"x\n").unwrap_err(),
        CsvError::StrayQuote { line: 2 }
    );
    // A closing quote may be followed by spaces, then the separator.
    assert_eq!(auto("a,b\n\"1\" ,2\n").unwrap().series[0].values, vec![1.0]);
}

#[test]
fn bounds_are_named() {
    let many = format!("a\n{}", "1\n".repeat(MAX_ROWS + 1));
    let err = auto(&many).unwrap_err();
    assert_eq!(
        err,
        CsvError::TooManyRows {
            line: MAX_ROWS + 2,
            limit: MAX_ROWS
        }
    );
    assert!(err.to_string().contains("1000000 rows"), "{err}");
    let wide: Vec<String> = (0..=MAX_COLUMNS).map(|i| format!("c{i}")).collect();
    assert!(matches!(
        auto(&format!("{}\n", wide.join(","))).unwrap_err(),
        CsvError::TooManyColumns { line: 1, found, .. } if found == MAX_COLUMNS + 1
    ));
    let huge = " ".repeat(MAX_BYTES + 1);
    let err = auto(&huge).unwrap_err();
    assert_eq!(err, CsvError::TooLarge { limit: MAX_BYTES });
    assert!(err.to_string().contains("64 MiB"));
    assert_eq!(err.line(), None);
}

#[test]
fn every_error_with_a_line_says_it_first() {
    let cases = [
        "a,b\n1\n",
        "a,b\n1,x\n",
        "a,b\n1,nan\n",
        "a,b\n1,\n",
        "a,,b\n",
        "a,a\n",
        "a,b\n\n1,2\n",
        "a\n\"1\n",
        "a\n1\"\n",
        "a\n",
    ];
    for text in cases {
        let err = auto(text).unwrap_err();
        let line = err
            .line()
            .unwrap_or_else(|| panic!("{text:?}: {err:?} has no line"));
        assert!(
            err.to_string().starts_with(&format!("line {line}")),
            "{text:?}: {err}"
        );
    }
}

/// Writes a field as a careful exporter would: quoted when it must be.
fn quote(field: &str) -> String {
    if field.contains([',', '"', '\n', '\r']) || field.trim() != field || field.is_empty() {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_string()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_input_is_read_or_refused_never_a_panic(text in ".{0,300}") {
        let _ = parse_series_csv(&text, &IndexColumn::Auto);
        let _ = parse_series_csv(&text, &IndexColumn::None);
        let _ = parse_series_csv(&text, &IndexColumn::Named("run".into()));
    }

    #[test]
    fn csv_like_input_is_read_or_refused_never_a_panic(
        text in proptest::collection::vec(
            prop_oneof![
                Just(","), Just("\""), Just("\n"), Just("\r\n"), Just("\r"), Just("1"),
                Just("2.5"), Just("run"), Just(" "), Just("nan"), Just("x"), Just("\u{feff}"),
            ],
            0..60,
        ).prop_map(|parts| parts.concat())
    ) {
        if let Ok(t) = parse_series_csv(&text, &IndexColumn::Auto) {
            prop_assert!(t.rows >= 1);
            for s in &t.series {
                prop_assert_eq!(s.values.len(), t.rows);
                prop_assert!(s.values.iter().all(|v| v.is_finite()));
            }
            if let Some(i) = &t.index {
                prop_assert_eq!(i.labels.len(), t.rows);
            }
        }
    }

    #[test]
    fn a_table_written_with_quotes_reads_back(
        labels in proptest::collection::vec("[ -~\n]{0,8}", 1..20),
        values in proptest::collection::vec(-1e12f64..1e12, 1..20),
        crlf in any::<bool>(),
    ) {
        let rows = labels.len().min(values.len());
        let eol = if crlf { "\r\n" } else { "\n" };
        let mut text = format!("revision,\"the, value\"{eol}");
        for r in 0..rows {
            text.push_str(&format!("{},{:?}{eol}", quote(&labels[r]), values[r]));
        }
        let t = parse_series_csv(&text, &IndexColumn::Auto).unwrap();
        prop_assert_eq!(t.rows, rows);
        prop_assert_eq!(&t.index.unwrap().labels[..], &labels[..rows]);
        prop_assert_eq!(&t.series[0].values[..], &values[..rows]);
    }
}
