#include <map>
#include <string>
#include <vector>
#include <algorithm>

struct Point { int x; int y; };

int main() {
    std::map<Point, std::string> names;
    names[Point{1, 2}] = "a";
    std::vector<Point> pts{{3, 4}, {1, 2}};
    std::sort(pts.begin(), pts.end());
    return static_cast<int>(names.size());
}
