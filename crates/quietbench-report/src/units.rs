//! Values in their units, as every view writes them.

/// Formats a value in its unit: nanoseconds scaled to µs/ms/s, other values with four
/// significant digits or one decimal, whichever is more.
pub fn format_value(value: f64, unit: &str) -> String {
    if unit == "ns" {
        let abs = value.abs();
        if abs >= 1e9 {
            format!("{:.3} s", value / 1e9)
        } else if abs >= 1e6 {
            format!("{:.3} ms", value / 1e6)
        } else if abs >= 1e3 {
            format!("{:.2} µs", value / 1e3)
        } else {
            format!("{value:.0} ns")
        }
    } else if value.abs() >= 100.0 || value == 0.0 {
        format!("{value:.1}")
    } else if value.abs() >= 10.0 {
        format!("{value:.2}")
    } else {
        // Small rates (2 invocations/s) need their digits: 1.9 and 2.0 can be 6% apart.
        format!("{value:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_latencies_and_keeps_rates_plain() {
        assert_eq!(format_value(725_123.0, "ns"), "725.12 µs");
        assert_eq!(format_value(2_500_000.0, "ns"), "2.500 ms");
        assert_eq!(format_value(812.0, "ns"), "812 ns");
        assert_eq!(format_value(3.2e9, "ns"), "3.200 s");
        assert_eq!(format_value(1379.25, "events/s"), "1379.2");
        assert_eq!(format_value(18.25, "invocations/s"), "18.25");
        assert_eq!(format_value(1.8867, "invocations/s"), "1.887");
        assert_eq!(format_value(0.0, "%"), "0.0");
    }
}
